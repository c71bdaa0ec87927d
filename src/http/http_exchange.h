// One request's way back to its client: what a handler answers with, whole
// or as a stream, and how it hears that the client went away.
//
// Threads: every method except post() runs on the connection's I/O thread
// (the handler is called there; work done elsewhere comes back with
// post()), so a connection's state needs no lock and what a handler sends
// goes out in the order it was sent.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "http/http_message.h"

namespace dsv4 {

class HttpExchange {
 public:
  virtual ~HttpExchange() = default;

  virtual const HttpRequest& request() const = 0;

  // The whole response (once; then the exchange is over).
  virtual void respond(HttpResponse response) = 0;

  // A response streamed in pieces: the head (its body ignored), then any
  // number of send()s, then end_stream(). Bytes the client has not taken
  // yet wait in memory up to a cap; a client that falls further behind (or
  // takes nothing for the write timeout) is disconnected, as one that went
  // away.
  virtual void begin_stream(HttpResponse head) = 0;
  virtual void send(std::string bytes) = 0;
  virtual void end_stream() = 0;

  // Bytes of the response waiting in memory because the client has not
  // taken them (the kernel's buffers are full); and f runs (once, on the
  // I/O thread) when they have all gone out. A stream uses them to pause
  // what produces it while its reader is behind.
  virtual size_t backlog() const = 0;
  virtual void on_drained(std::function<void()> f) = 0;

  // f runs (on the I/O thread) when the client is gone or was disconnected
  // before the response was complete; never after that. Registered after
  // it happened, f runs soon (posted).
  virtual void on_abandoned(std::function<void()> f) = 0;
  // Whether that has happened.
  virtual bool abandoned() const = 0;

  // Runs f on the connection's I/O thread. Thread-safe.
  virtual void post(std::function<void()> f) = 0;

  // Appended to the request's access-log line ("tokens 12+34", an id).
  virtual void set_log_note(std::string note) = 0;
};

}  // namespace dsv4
