// golden_compare: compares a run's JSON or JSON Lines output with a golden recording, field by field.
//   golden_compare GOLDEN ACTUAL [--tolerance R]
// Without --tolerance every number must be bit-identical (as parsed doubles); with it, |a - b| <= R max(|a|,
// |b|) for real numbers, while integers (steps, counters) and byte counts (any field under a key that names
// bytes, such as bench/zeropp's per-step averages) must still be equal: no ISA changes how many bytes a step
// moves. Timing and memory fields (ms, tokens_per_s, mfu, comm_wait_ms, the stages' ms,
// the peak RSS and the memory guard's prediction) are not compared: they are the machine's, not the
// computation's. Prints each difference with its path (at most 20) and exits 1 when there is any, 2 on bad
// usage or an unreadable file.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using nlohmann::json;

const std::set<std::string> kIgnored = {"ms",
                                        "tokens_per_s",
                                        "mfu",
                                        "comm_wait_ms",
                                        "stage_busy_ms",
                                        "stage_pipeline_ms",
                                        "peak_rss_bytes",
                                        "peak_rss_bytes_per_rank",
                                        "predicted_peak_bytes"};

// A file as JSON: a JSON document as is, JSON Lines as the array of its lines.
json read_records(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open");
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  if (json::accept(all)) return json::parse(all);
  json records = json::array();
  std::istringstream lines(all);
  for (std::string line; std::getline(lines, line);) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) records.push_back(json::parse(line));
  }
  return records;
}

struct Comparison {
  double tolerance = 0;  // 0: bit-identical
  int differences = 0;

  void report(const std::string& path, const json& golden, const json& actual) {
    if (++differences <= 20)
      std::printf("  %s: golden %s, actual %s\n", path.c_str(), golden.dump().c_str(), actual.dump().c_str());
  }
  bool numbers_match(const std::string& path, const json& golden, const json& actual) const {
    const double a = golden.get<double>(), b = actual.get<double>();
    const bool exact = tolerance == 0 || (golden.is_number_integer() && actual.is_number_integer()) ||
                       path.find("bytes") != std::string::npos;
    if (exact) return a == b || (std::isnan(a) && std::isnan(b));
    if (a == b) return true;
    return std::fabs(a - b) <= tolerance * std::max(std::fabs(a), std::fabs(b));
  }
  void compare(const std::string& path, const json& golden, const json& actual) {
    if (golden.is_number() && actual.is_number()) {
      if (!numbers_match(path, golden, actual)) report(path, golden, actual);
    } else if (golden.is_object() && actual.is_object()) {
      for (const auto& [key, value] : golden.items()) {
        if (kIgnored.count(key)) continue;
        if (!actual.contains(key)) {
          report(path + "." + key, value, json("(missing)"));
          continue;
        }
        compare(path + "." + key, value, actual[key]);
      }
    } else if (golden.is_array() && actual.is_array()) {
      if (golden.size() != actual.size()) {
        report(path + ".size", golden.size(), actual.size());
        return;
      }
      for (size_t i = 0; i < golden.size(); ++i)
        compare(path + "[" + std::to_string(i) + "]", golden[i], actual[i]);
    } else if (golden != actual) {
      report(path, golden, actual);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--tolerance")) {
    std::fprintf(stderr, "usage: golden_compare GOLDEN ACTUAL [--tolerance R]\n");
    return 2;
  }
  Comparison comparison;
  if (argc == 5) comparison.tolerance = std::atof(argv[4]);
  try {
    comparison.compare("", read_records(argv[1]), read_records(argv[2]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "golden_compare: %s\n", e.what());
    return 2;
  }
  if (comparison.differences > 0) {
    std::printf("%s: %d difference(s) from %s\n", argv[2], comparison.differences, argv[1]);
    return 1;
  }
  return 0;
}
