// Human units on the command line: memory sizes ("32GB", "32GiB", "512MB", "32e9") and link rates
// ("150GB/s" in bytes, "100Gb/s", "100Gbit/s", "400Gbps" in bits), for the planner's cluster flags.
// Decimal prefixes are powers of 1000 (1GB = 1e9 bytes), binary ones powers of 1024 (1GiB = 2^30 bytes); a
// capital B is bytes and a lowercase b (or "bit", or "bps") is bits, as network vendors write them.
#pragma once

#include <string>

namespace gpt {

// Bytes in `text`: a positive number with an optional unit (B, kB/KB, MB, GB, TB, KiB, MiB, GiB, TiB; none
// means bytes). Throws UsageError naming `text` (and `flag`, when given) with an example.
double parse_bytes(const std::string& text, const std::string& flag = "");

// Bytes per second in `text`: a positive number with a rate unit, in bytes (B/s, MB/s, GB/s, GiB/s, ...) or
// in bits (b/s, Mb/s, Gb/s, Gbit/s, Gbps, ...; divided by 8); a bare number is bytes per second. Throws
// UsageError naming `text` (and `flag`, when given) with an example.
double parse_rate(const std::string& text, const std::string& flag = "");

}  // namespace gpt
