// Publishing an outbox event from a C++ service without an outbox table: the event, a protobuf
// outbox.v1.Event (proto/outbox/v1/event.proto), goes into the WAL as a transactional logical
// decoding message, in the caller's transaction, and `outbox-relay --messages PREFIX` relays it
// to Kafka once (and only if) that transaction commits. Nothing to clean up afterwards.
//
//   PQexec(conn, "BEGIN");
//   ... the business change on conn ...
//   const std::string id = outbox::client::emit(conn, "outbox",
//       outbox::client::event("order", "42", "OrderPaid", R"({"total": 9.5})"));
//   PQexec(conn, "COMMIT");
//
// Header-only; needs libpq and the outbox_proto library (CMake target outbox_client). Emit on the
// connection of the business transaction: emitted outside a transaction block, the event is a
// transaction of its own. Thread-compatible, as a PGconn is.
#pragma once

#include <libpq-fe.h>

#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "outbox/v1/event.pb.h"

namespace outbox::client {

// A random (version 4) UUID as text.
inline std::string random_uuid() {
  std::random_device device;
  std::array<std::uint8_t, 16> b{};
  for (std::size_t i = 0; i < b.size(); i += 4) {
    const std::uint32_t r = device();
    for (std::size_t j = 0; j < 4; ++j) b[i + j] = static_cast<std::uint8_t>(r >> (8 * j));
  }
  b[6] = static_cast<std::uint8_t>((b[6] & 0x0F) | 0x40);
  b[8] = static_cast<std::uint8_t>((b[8] & 0x3F) | 0x80);
  constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < b.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 15];
  }
  return out;
}

// An event with a new id; `headers` become Kafka headers after id and type.
inline outbox::v1::Event event(std::string aggregate_type, std::string aggregate_id,
                               std::string type, std::string payload,
                               std::vector<std::pair<std::string, std::string>> headers = {}) {
  outbox::v1::Event e;
  e.set_id(random_uuid());
  e.set_aggregate_type(std::move(aggregate_type));
  e.set_aggregate_id(std::move(aggregate_id));
  e.set_type(std::move(type));
  e.set_payload(std::move(payload));
  for (auto& [name, value] : headers) (*e.mutable_headers())[std::move(name)] = std::move(value);
  return e;
}

// Emits `e` with pg_logical_emit_message(true, prefix, bytes) on `conn`; returns its id (one is
// generated when empty). Throws std::runtime_error with the server's message when the statement
// fails (the transaction is then aborted, as with any failed statement).
inline std::string emit(PGconn* conn, std::string_view prefix, outbox::v1::Event e) {
  if (e.id().empty()) e.set_id(random_uuid());
  const std::string bytes = e.SerializeAsString();
  const std::string prefix_text(prefix);
  const std::array<const char*, 2> values = {prefix_text.c_str(), bytes.data()};
  const std::array<int, 2> lengths = {0, static_cast<int>(bytes.size())};
  const std::array<int, 2> formats = {0, 1};  // the content in binary: bytea's bytes as they are
  const std::unique_ptr<PGresult, decltype(&PQclear)> result(
      PQexecParams(conn, "SELECT pg_catalog.pg_logical_emit_message(true, $1, $2::bytea)", 2,
                   nullptr, values.data(), lengths.data(), formats.data(), 0),
      &PQclear);
  if (!result || PQresultStatus(result.get()) != PGRES_TUPLES_OK) {
    throw std::runtime_error(std::string("outbox::client::emit: ") + PQerrorMessage(conn));
  }
  return e.id();
}

}  // namespace outbox::client
