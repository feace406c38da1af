// The flag parser: values in both spellings, ranges, switches, aliases, and the messages users see.
#include "base/flags.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

struct Parsed {
  int layers = 12;
  double lr = 1e-3;
  std::string path;
  bool fp16 = false;
};

gpt::FlagParser make_parser(Parsed& p) {
  gpt::FlagParser flags("prog", "test");
  flags.add_int("--num-layers", &p.layers, "layers", 1, 100);
  flags.add_double("--lr", &p.lr, "learning rate", 0.0, 1.0);
  flags.add_string("--data-path", &p.path, "data");
  flags.add_switch("--fp16", &p.fp16, "half precision");
  flags.add_alias("--layers", "--num-layers");
  return flags;
}

std::string error_of(std::vector<const char*> args) {
  Parsed p;
  gpt::FlagParser flags = make_parser(p);
  args.insert(args.begin(), "prog");
  try {
    flags.parse(static_cast<int>(args.size()), args.data());
  } catch (const gpt::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("values, switches and aliases") {
  Parsed p;
  gpt::FlagParser flags = make_parser(p);
  const char* argv[] = {"prog", "--layers", "4", "--lr=3e-4", "--data-path", "a/*.bin", "--fp16"};
  CHECK(flags.parse(7, argv));
  CHECK(p.layers == 4);
  CHECK(p.lr == doctest::Approx(3e-4));
  CHECK(p.path == "a/*.bin");
  CHECK(p.fp16);
  CHECK(flags.given("--num-layers"));
  CHECK(flags.given("--lr"));
  CHECK_FALSE(flags.given("--fp17"));
}

TEST_CASE("errors name the flag, the value and the fix") {
  CHECK(error_of({"--num-layers", "abc"}) == "--num-layers expects an integer, got 'abc'");
  CHECK(error_of({"--num-layers", "0"}) == "--num-layers is 0, outside its range [1, 100]");
  CHECK(error_of({"--lr", "fast"}) == "--lr expects a number, got 'fast'");
  CHECK(error_of({"--lr"}) == "--lr needs a value");
  CHECK(error_of({"--num-layer", "3"}) ==
        "unknown flag --num-layer; did you mean --num-layers? (see --help)");
  CHECK(error_of({"--fp16=1"}) == "--fp16 is a switch and takes no value");
  CHECK(error_of({"stray"}) == "unexpected argument 'stray'; every option is a --flag (see --help)");
}

TEST_CASE("help lists groups, aliases and defaults") {
  Parsed p;
  gpt::FlagParser flags = make_parser(p);
  const std::string help = flags.help();
  CHECK(help.find("--num-layers N, --layers") != std::string::npos);
  CHECK(help.find("(default 12)") != std::string::npos);
}

TEST_CASE("positional arguments are collected only where the tool takes them") {
  std::vector<std::string> files;
  int n = 1;
  gpt::FlagParser flags("prog", "test");
  flags.add_int("--n", &n, "a count", 1, 10);
  flags.add_positional("FILE", &files);
  const char* argv[] = {"prog", "a.txt", "--n", "3", "b.txt"};
  CHECK(flags.parse(5, argv));
  CHECK(files == std::vector<std::string>{"a.txt", "b.txt"});
  CHECK(n == 3);
  CHECK(flags.help().find("usage: prog [flags] FILE...") != std::string::npos);
}

TEST_CASE("registering a flag again replaces it") {
  int interval = 5;
  gpt::FlagParser flags("prog", "test");
  flags.add_int("--eval-interval", &interval, "every N steps", 1, 100);
  flags.add_int("--eval-interval", &interval, "every N steps, 0 = at the end", 0, 100);
  const char* argv[] = {"prog", "--eval-interval", "0"};
  CHECK(flags.parse(3, argv));
  CHECK(interval == 0);
  CHECK(flags.help().find("0 = at the end") != std::string::npos);
  CHECK(flags.help().find("every N steps (") == std::string::npos);
}

TEST_CASE("a program without flags says so") {
  std::vector<std::string> files;
  gpt::FlagParser flags("prog", "test");
  flags.add_positional("FILE", &files);
  const char* argv[] = {"prog", "--x"};
  try {
    flags.parse(2, argv);
    FAIL("no error");
  } catch (const gpt::UsageError& e) {
    CHECK(std::string(e.what()) == "unknown flag --x; this program takes no flags (see --help)");
  }
}
