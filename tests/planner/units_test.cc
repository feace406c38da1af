// Memory sizes and link rates as the planner's flags take them: every accepted spelling with its value in
// bytes (or bytes per second), and every rejected one with the exact message a user sees.
#include "train/units.h"

#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "base/user_error.h"

namespace {

std::string error_of(double (*parse)(const std::string&, const std::string&), const std::string& text,
                     const std::string& flag = "") {
  try {
    parse(text, flag);
  } catch (const gpt::UsageError& e) {
    return e.what();
  }
  return "(accepted)";
}

const double GiB = 1024.0 * 1024 * 1024;

}  // namespace

TEST_CASE("sizes: decimal and binary prefixes, plain numbers") {
  const struct {
    const char* text;
    double bytes;
  } good[] = {
      {"32GB", 32e9},   {"32GiB", 32 * GiB}, {"32e9", 32e9}, {"512MB", 512e6},     {"1.5TB", 1.5e12},
      {"64KiB", 65536}, {"2kB", 2000},       {"2KB", 2000},  {"100", 100},         {"100B", 100},
      {"32 GB", 32e9},  {"0.5MiB", 524288},  {"80GB", 80e9}, {"1TiB", 1024 * GiB},
  };
  for (const auto& g : good) {
    INFO(g.text);
    CHECK(gpt::parse_bytes(g.text) == g.bytes);
  }
}

TEST_CASE("sizes: every rejected form names the text and shows an example") {
  const std::string bad =
      "' is not a memory size; write a number and a unit, for example 32GB (1e9 bytes), "
      "32GiB (2^30 bytes), 512MB or 32e9";
  const struct {
    const char* text;
    std::string message;
  } cases[] = {
      {"32XB", "'32XB" + bad},
      {"", "'" + bad},
      {"GB", "'GB" + bad},
      {"32G", "'32G" + bad},
      {"32gb", "'32gb" + bad},
      {"32GB/s", "'32GB/s" + bad},
      {"inf", "'inf" + bad},
      {"1e400GB", "'1e400GB" + bad},
      {"+32GB", "'+32GB" + bad},
      {"0GB", "'0GB' must be positive, for example 32GB"},
      {"-1GB", "'-1GB' must be positive, for example 32GB"},
      {"32Gb", "'32Gb' is in bits; a memory size is in bytes, for example 32GB"},
      {"32Gbit", "'32Gbit' is in bits; a memory size is in bytes, for example 32GB"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    CHECK(error_of(gpt::parse_bytes, c.text) == c.message);
  }
  CHECK(error_of(gpt::parse_bytes, "lots", "--gpu-memory") == "--gpu-memory: 'lots" + bad);
}

TEST_CASE("rates: bytes per second, and bits per second divided by 8") {
  const struct {
    const char* text;
    double bytes_per_s;
  } good[] = {
      {"150GB/s", 150e9}, {"25GB/s", 25e9},   {"100Gb/s", 12.5e9}, {"100Gbit/s", 12.5e9},
      {"400Gbps", 50e9},  {"800Mbps", 1e8},   {"1GiB/s", GiB},     {"12.5e9", 12.5e9},
      {"200 Gb/s", 25e9}, {"1.6Tb/s", 200e9}, {"10B/s", 10},       {"8b/s", 1},
  };
  for (const auto& g : good) {
    INFO(g.text);
    CHECK(gpt::parse_rate(g.text) == doctest::Approx(g.bytes_per_s).epsilon(1e-15));
  }
  CHECK(gpt::parse_rate("100Gb/s") == 12.5e9);  // exact, not approximately
}

TEST_CASE("rates: every rejected form names the text and shows an example") {
  const std::string bad =
      "' is not a rate; write a number and a unit, for example 150GB/s (bytes per "
      "second), or 100Gb/s, 100Gbit/s or 400Gbps (bits per second)";
  const struct {
    const char* text;
    std::string message;
  } cases[] = {
      {"fast", "'fast" + bad},
      {"", "'" + bad},
      {"100Gb/sec", "'100Gb/sec" + bad},
      {"100GBps", "'100GBps" + bad},
      {"100G/s", "'100G/s" + bad},
      {"nan", "'nan" + bad},
      {"150GB", "'150GB' is a size, not a rate; add /s, for example 150GB/s"},
      {"100Gb", "'100Gb' is a size, not a rate; add /s, for example 100Gb/s"},
      {"0Gb/s", "'0Gb/s' must be positive, for example 100Gb/s"},
      {"-5GB/s", "'-5GB/s' must be positive, for example 100Gb/s"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    CHECK(error_of(gpt::parse_rate, c.text) == c.message);
  }
  CHECK(error_of(gpt::parse_rate, "150GB", "--intra-node-bandwidth") ==
        "--intra-node-bandwidth: '150GB' is a size, not a rate; add /s, for example 150GB/s");
}
