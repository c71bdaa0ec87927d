"""The conversations the default model learns from, made by this recipe (no outside text):

  * arithmetic: addition and subtraction of whole numbers up to 999, asked in many phrasings,
    answered directly (chat mode) or after column-by-column reasoning (thinking mode);
  * tool use: a calculator and three lookups offered as tools; the model calls the right tool with
    the right arguments in DSML, then answers from the tool's result;
  * short multi-turn chats: greetings, who the model is, and questions after earlier turns.

Each conversation is an OpenAI-style message list plus the thinking flag; render.py turns it into
the exact text `dsv4 serve` renders. The phrasings are split: `split="train"` draws from one set,
`split="heldout"` from frames and wordings training never sees (the accuracy checks use those).
"""

import random

# -- arithmetic ------------------------------------------------------------------------------

# How an operation is spelt inside a question: {a} and {b} the operands.
ADD_TRAIN = ["{a} + {b}", "{a} plus {b}", "{a}+{b}", "the sum of {a} and {b}", "{a} added to {b}", "{a} and {b} added together"]
SUB_TRAIN = ["{a} - {b}", "{a} minus {b}", "{a}-{b}", "the difference of {a} and {b}", "{b} subtracted from {a}",
             "{a} take away {b}"]
ADD_HELDOUT = ["{a} increased by {b}", "the total of {a} and {b}", "{a} + {b} (addition)"]
SUB_HELDOUT = ["{a} decreased by {b}", "{a} less {b}", "{a} - {b} (subtraction)"]

# A question around the operation.
FRAMES_TRAIN = [
    "What is {x}?", "What's {x}?", "Compute {x}.", "Calculate {x}.", "How much is {x}?", "{x} = ?", "Please compute {x}.",
    "Can you work out {x}?", "Tell me {x}.", "Quick question: what is {x}?", "I need {x}.", "Solve {x}.",
    "what is {x}", "Evaluate {x}, please.", "Find {x}.", "Hey, what does {x} come to?",
]
FRAMES_HELDOUT = [
    "Could you figure out {x} for me?", "Give me the value of {x}.", "Work out {x} and tell me the result.",
    "I'd like to know {x}.", "Help me with this: {x}",
]
# Word problems: the operation in a small story.
STORIES_TRAIN = [
    ("add", "I have {a} apples and buy {b} more. How many apples do I have?"),
    ("add", "A library has {a} books and gets {b} new ones. How many books does it have now?"),
    ("sub", "I had {a} coins and spent {b}. How many coins are left?"),
    ("sub", "A train carries {a} people and {b} get off. How many remain on the train?"),
]
STORIES_HELDOUT = [
    ("add", "There are {a} birds on a tree and {b} more land on it. How many birds are on the tree?"),
    ("sub", "A shop had {a} shirts and sold {b}. How many shirts does it have left?"),
]


def column_reasoning(a, b, op):
    """Column arithmetic as the thinking-mode reasoning: ones, tens, hundreds with carries or
    borrows, then the result."""
    sign = "+" if op == "add" else "-"
    lines = [f"I need {a} {sign} {b}."]
    if op == "sub" and b > a:
        lines.append(f"{b} is larger than {a}, so I compute {b} - {a} and make it negative.")
        big, small = b, a
    else:
        big, small = a, b
    places = ["ones", "tens", "hundreds", "thousands"]
    digits_big = [int(c) for c in reversed(str(big))]
    digits_small = [int(c) for c in reversed(str(small))]
    n = max(len(digits_big), len(digits_small))
    carry, out = 0, []
    for i in range(n):
        x = digits_big[i] if i < len(digits_big) else 0
        y = digits_small[i] if i < len(digits_small) else 0
        if op == "add":
            total = x + y + carry
            extra = f" + {carry}" if carry else ""
            digit, carry = total % 10, total // 10
            note = f", write {digit} and carry 1" if carry else f", write {digit}"
            lines.append(f"{places[i].capitalize()}: {x} + {y}{extra} = {total}{note}.")
        else:
            top = x - carry
            if top < y:
                lines.append(f"{places[i].capitalize()}: {x}{' - 1' if carry else ''} is less than {y}, borrow: "
                             f"{top + 10} - {y} = {top + 10 - y}.")
                digit, carry = top + 10 - y, 1
            else:
                lines.append(f"{places[i].capitalize()}: {x}{' - 1' if carry else ''} - {y} = {top - y}.")
                digit, carry = top - y, 0
        out.append(digit)
    if op == "add" and carry:
        lines.append(f"{places[n].capitalize()}: carry 1.")
        out.append(1)
    result = a + b if op == "add" else a - b
    lines.append(f"So {a} {sign} {b} = {result}.")
    return "\n".join(lines)


def operands(rng):
    """Numbers up to 999, with small ones common enough to be seen often."""
    def one():
        digits = rng.choice([1, 2, 3, 3, 3])
        return rng.randrange(0 if digits == 1 else 10 ** (digits - 1), 10**digits)
    return one(), one()


def arithmetic_question(rng, split):
    a, b = operands(rng)
    heldout = split == "heldout"
    if rng.random() < 0.15:
        op, text = rng.choice(STORIES_HELDOUT if heldout else STORIES_TRAIN)
        return a, b, op, text.format(a=a, b=b)
    op = rng.choice(["add", "sub"])
    spellings = (ADD_HELDOUT if heldout else ADD_TRAIN) if op == "add" else (SUB_HELDOUT if heldout else SUB_TRAIN)
    frames = FRAMES_HELDOUT if heldout else FRAMES_TRAIN
    return a, b, op, rng.choice(frames).format(x=rng.choice(spellings).format(a=a, b=b))


def answer_text(a, b, op):
    sign = "+" if op == "add" else "-"
    return f"{a} {sign} {b} = {a + b if op == 'add' else a - b}."


def arithmetic(rng, split, thinking):
    a, b, op, question = arithmetic_question(rng, split)
    reply = {"role": "assistant", "content": answer_text(a, b, op)}
    if thinking:
        reply["reasoning_content"] = column_reasoning(a, b, op)
    return {"messages": [{"role": "user", "content": question}, reply], "thinking": thinking,
            "check": {"kind": "arithmetic", "answer": a + b if op == "add" else a - b}}


# -- tools -----------------------------------------------------------------------------------

def _tool(name, description, params, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": params, "required": required}}}


CALCULATOR = _tool("calculator", "Evaluates an arithmetic expression.",
                   {"expression": {"type": "string", "description": "The expression, e.g. 2 + 3"}}, ["expression"])
WEATHER = _tool("get_weather", "Gets the current weather in a city.",
                {"city": {"type": "string", "description": "The city name"}}, ["city"])
POPULATION = _tool("get_population", "Looks up the population of a city.",
                   {"city": {"type": "string", "description": "The city name"}}, ["city"])
TIME = _tool("get_time", "Gets the local time in a city.",
             {"city": {"type": "string", "description": "The city name"}}, ["city"])
LOOKUPS = [WEATHER, POPULATION, TIME]

CITIES_TRAIN = ["Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Cairo", "Lima", "Oslo", "Seoul", "Delhi", "Sydney",
                "Toronto", "Chicago", "Boston", "Lisbon", "Vienna", "Prague", "Dublin", "Athens", "Nairobi", "Bangkok",
                "Manila", "Santiago", "Havana", "Warsaw", "Helsinki", "Zurich", "Munich", "Denver", "Austin", "Miami"]
CITIES_HELDOUT = ["Stockholm", "Brussels", "Budapest", "Istanbul", "Jakarta", "Bogota", "Quito", "Osaka", "Hanoi",
                  "Lagos", "Accra", "Montreal", "Seattle", "Houston", "Phoenix", "Geneva"]

SYLLABLES = ["ka", "lo", "mi", "ra", "ven", "dor", "sa", "tu", "bel", "no", "gar", "is", "pe", "zan", "or", "wi",
             "ham", "el", "cor", "ta", "rin", "ba", "sol", "fe", "gun", "ly", "mar", "ox", "que", "dra"]


def invented_city(rng):
    """A made-up place name: training sees many names it must copy into the call, not a few it
    could memorise (the held-out cities are real ones it never saw)."""
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.choice([2, 2, 3]))).capitalize()


def training_city(rng):
    if rng.random() < 0.3:
        return rng.choice(CITIES_TRAIN)
    while (name := invented_city(rng)) in CITIES_HELDOUT:
        pass
    return name


ASK_TRAIN = {
    "get_weather": ["What's the weather in {c}?", "How is the weather in {c} today?", "Is it warm in {c} right now?",
                    "Tell me the weather in {c}."],
    "get_population": ["How many people live in {c}?", "What is the population of {c}?", "What's {c}'s population?",
                       "Population of {c}?"],
    "get_time": ["What time is it in {c}?", "What's the local time in {c}?", "Tell me the time in {c}.",
                 "Current time in {c}?"],
}
ASK_HELDOUT = {
    "get_weather": ["Could you check the weather for {c}?", "I'm going to {c}: what's the weather like there?"],
    "get_population": ["Roughly how big is {c} by population?", "Could you look up how many people {c} has?"],
    "get_time": ["Could you tell me the current time in {c}?", "I have a call with {c}: what time is it there?"],
}
CALC_ASK_TRAIN = ["Use the calculator: what is {x}?", "What is {x}?", "Calculate {x}.", "Compute {x}."]
CALC_ASK_HELDOUT = ["Could you figure out {x} for me?", "Work out {x} and tell me the result."]
SYSTEM_PROMPTS = ["", "You are a helpful assistant.", "You are a concise assistant with tools."]


def tool_result(rng, name, city):
    if name == "get_weather":
        value = rng.randrange(-10, 40)
        sky = rng.choice(["sunny", "cloudy", "rainy", "windy", "snowy"])
        return {"city": city, "temperature_c": value, "sky": sky}, f"It is {value} degrees C and {sky} in {city}.", value
    if name == "get_population":
        value = rng.randrange(100, 40000) * 1000
        return {"city": city, "population": value}, f"{city} has a population of {value}.", value
    hour, minute = rng.randrange(24), rng.randrange(60)
    value = f"{hour:02d}:{minute:02d}"
    return {"city": city, "time": value}, f"The local time in {city} is {value}.", value


def offered_tools(rng, must):
    tools = [t for t in [CALCULATOR] + LOOKUPS if t is must or rng.random() < 0.5]
    rng.shuffle(tools)
    return tools


def tool_use(rng, split, thinking):
    heldout = split == "heldout"
    call_id = f"call_{rng.randrange(16**8):08x}"
    if rng.random() < 0.35:
        a, b = operands(rng)
        op = rng.choice(["add", "sub"])
        expression = f"{a} {'+' if op == 'add' else '-'} {b}"
        tool = CALCULATOR
        question = rng.choice(CALC_ASK_HELDOUT if heldout else CALC_ASK_TRAIN).format(x=expression)
        arguments = {"expression": expression}
        value = a + b if op == "add" else a - b
        result, final = {"result": value}, f"{expression} = {value}."
        reasoning = f"The user wants {expression}. I will use the calculator tool."
    else:
        tool = rng.choice(LOOKUPS)
        name = tool["function"]["name"]
        city = rng.choice(CITIES_HELDOUT) if heldout else training_city(rng)
        question = rng.choice((ASK_HELDOUT if heldout else ASK_TRAIN)[name]).format(c=city)
        arguments = {"city": city}
        result, final, value = tool_result(rng, name, city)
        reasoning = f"The user asks about {city}. I will call {name}."
    tools = offered_tools(rng, tool)
    system = {"role": "system", "content": rng.choice(SYSTEM_PROMPTS), "tools": tools}
    call = {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": {
        "name": tool["function"]["name"], "arguments": _json(arguments)}}]}
    if thinking:
        call["reasoning_content"] = reasoning
    first = [system, {"role": "user", "content": question}, call]
    answer = {"role": "assistant", "content": final}
    if thinking:
        answer["reasoning_content"] = f"The tool returned {_json(result)}."
    messages = first + [{"role": "tool", "tool_call_id": call_id, "content": _json(result)}, answer]
    check = {"kind": "tool", "name": tool["function"]["name"], "arguments": arguments, "value": value}
    return {"messages": messages, "thinking": thinking, "check": check}


def _json(value):
    import json
    return json.dumps(value, ensure_ascii=False)


# -- short chats -----------------------------------------------------------------------------

GREETINGS = ["Hello!", "Hi", "Hello, who are you?", "Who are you?", "Hey there", "Good morning!", "What can you do?",
             "Hi! What are you?", "Introduce yourself."]
INTRO = ("Hello! I am the small default model of dsv4, a DeepSeek-V4 model trained to add and subtract numbers "
         "up to 999 and to call tools. Ask me a sum!")
THANKS = ["Thanks!", "Thank you.", "Great, thanks.", "Perfect."]
WELCOME = ["You're welcome!", "Glad to help.", "Any time!"]


def chat(rng, split, thinking):
    turns = []
    if rng.random() < 0.5:
        turns += [{"role": "user", "content": rng.choice(GREETINGS)}, {"role": "assistant", "content": INTRO}]
    for _ in range(rng.choice([1, 1, 2])):
        a, b, op, question = arithmetic_question(rng, split)
        turns += [{"role": "user", "content": question}, {"role": "assistant", "content": answer_text(a, b, op)}]
    if rng.random() < 0.3:
        turns += [{"role": "user", "content": rng.choice(THANKS)}, {"role": "assistant", "content": rng.choice(WELCOME)}]
    if thinking:
        for t in turns:
            if t["role"] == "assistant":
                t["reasoning_content"] = "The user greets me or asks something simple."
    # the last assistant turn is the one learned; earlier ones are history
    return {"messages": turns, "thinking": thinking, "check": {"kind": "chat"}}


def greeting(rng, thinking):
    msgs = [{"role": "user", "content": rng.choice(GREETINGS)}, {"role": "assistant", "content": INTRO}]
    if thinking:
        msgs[1]["reasoning_content"] = "The user greets me. I introduce myself."
    return {"messages": msgs, "thinking": thinking, "check": {"kind": "chat"}}


MIX = (0.65, 0.25, 0.07, 0.03)  # arithmetic, tool use, chats, greetings


def conversations(seed, count, split="train", mix=MIX):
    """count conversations of the split, drawn from seed, the kinds in the shares of mix."""
    rng = random.Random(seed)
    makers = [lambda t: arithmetic(rng, split, t), lambda t: tool_use(rng, split, t), lambda t: chat(rng, split, t),
              lambda t: greeting(rng, t)]
    out = []
    while len(out) < count:
        thinking = rng.random() < 0.5
        out.append(rng.choices(makers, weights=mix)[0](thinking))
    return out
