// Fuzzes the router's own parsing: the event relay (router/sse_relay.h) that
// passes a replica's event stream to the client whole events at a time. The first
// byte picks the piece size the bytes arrive in (1 to 256). Checked: the relayed
// bytes are a prefix of the input, unchanged; reading in pieces relays exactly
// what reading at once does and agrees on [DONE]; and a stream that broke off,
// with its ending appended, is relayed whole and ends with [DONE].
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "distllm/router/sse_relay.h"

using distllm::router::SseRelay;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t piece = 1 + data[0];
  const std::string_view wire(reinterpret_cast<const char*>(data) + 1, size - 1);
  SseRelay whole, pieces;
  std::string out_whole, out_pieces;
  whole.feed(wire, out_whole);
  for (size_t at = 0; at < wire.size(); at += piece) pieces.feed(wire.substr(at, piece), out_pieces);
  if (out_whole != out_pieces || whole.done() != pieces.done() || whole.relayed() != out_whole.size()) __builtin_trap();
  if (wire.substr(0, out_whole.size()) != out_whole) __builtin_trap();
  if (!whole.done()) {
    const std::string client_sees = out_whole + whole.broken_ending(502, "broken \xff", "replica_stream_broken");
    SseRelay check;
    std::string again;
    check.feed(client_sees, again);
    if (again != client_sees || !check.done()) __builtin_trap();
  }
  return 0;
}
