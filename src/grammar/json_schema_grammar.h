// JSON Schema (and "any JSON") as grammars. The output is compact JSON (no
// whitespace between tokens) that validates against the schema.
//
// Supported: type (one or a list), properties / required /
// additionalProperties (declared properties in order, optional ones
// skippable; a schema without properties but with additionalProperties is a
// map), enum, const, anyOf / oneOf, allOf of one schema, local $ref
// ("#", "#/$defs/...", "#/definitions/..."), arrays with items, prefixItems,
// minItems / maxItems, strings with minLength / maxLength, pattern (see
// regex_grammar.h) and the formats date, time, date-time, uuid, email,
// integers with minimum / maximum (exclusive too), numbers with integral
// minimum / maximum. Annotations (title, description, default, ...) are
// ignored. Anything else that constrains a value is an error naming it.
//
// Numbers keep to what every JSON reader holds exactly: at most 15 integer
// digits (integers are safe in a double), 15 fraction digits, and a
// two-digit exponent.
#pragma once

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "grammar/grammar.h"

namespace dsv4 {

StatusOr<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema);

// A rule of `g` matching the JSON texts valid under `schema`, for grammars
// that embed JSON values. Local references resolve against refs_root (the
// document `schema` sits in; null: `schema` itself); path is where errors
// say `schema` is ("#": the root).
StatusOr<Symbol> add_json_schema(Grammar* g, const nlohmann::ordered_json& schema, const std::string& name,
                                 const nlohmann::ordered_json* refs_root = nullptr, const std::string& path = "#");

// Any JSON object (response_format json_object).
Grammar json_object_grammar();

}  // namespace dsv4
