// The checkpoint manifest's strict reader: a manifest written by manifest_text reads back to the same
// manifest, and every kind of damage a hand edit or a truncation can do is refused with one line naming the
// field.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "model/params.h"
#include "zero/checkpoint_manifest.h"
#include "zero/partition.h"

namespace gpt {
namespace {

using json = nlohmann::ordered_json;

// A manifest as a 4-rank ZeRO-3 run of a tiny model would save it; with `stages` pipeline stages, as a run of
// 4 x stages ranks (4 data-parallel ranks in each stage).
CheckpointManifest tiny_manifest(int stages = 1) {
  CheckpointManifest m;
  m.position = {40, 1, 8, 1234};
  m.applied_steps = 39;
  m.scaler = {32768.0, 2, 40, 17};
  m.model.num_layers = 2;
  m.model.hidden = 32;
  m.model.heads = 2;
  m.model.max_positions = m.model.seq_len = 8;
  m.model.vocab = 64;
  m.world_size = 4 * stages;
  m.pipeline.stages = stages;
  m.stage = 3;
  m.precision = "fp16";
  for (int s = 0; s < stages; ++s) {
    const ParamTable table = m.saved_table(s);
    const Partition partition(table, 4, 4);
    CheckpointManifest::Stage stage{{}, partition.shard_total()};
    for (size_t u = 0; u < table.units.size(); ++u) {
      const UnitPartition& p = partition.unit(int(u));
      stage.units.push_back({table.units[u].name, p.numel, p.shard, p.shard_offset});
    }
    for (int r = 0; r < 4; ++r) {
      m.files.push_back(
          {shard_file_name(r, 4, 0, 1, s, stages), 3 * stage.shard_total * 4, std::string(64, 'a' + r)});
    }
    m.stages.push_back(stage);
  }
  return m;
}

// The error parse_manifest gives for the manifest (of `stages` pipeline stages) after `edit`; "" when it
// accepts it.
template <typename Edit>
std::string error_after(Edit edit, int stages = 1) {
  json j = json::parse(manifest_text(tiny_manifest(stages)));
  edit(j);
  try {
    parse_manifest(j.dump(), "ckpt/manifest.json");
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.rfind("ckpt/manifest.json: ", 0) == 0);
    return message;
  }
  return "";
}

TEST_CASE("a written manifest reads back to itself") {
  const std::string text = manifest_text(tiny_manifest());
  const CheckpointManifest back = parse_manifest(text, "m");
  CHECK(manifest_text(back) == text);
  CHECK(back.num_shards() == 4);
  CHECK(back.position.seed == 1234);
  CHECK(back.scaler.last_overflow_iteration == 17);
  CHECK(error_after([](json&) {}) == "");
}

TEST_CASE("damaged manifests are refused with the field named") {
  CHECK(error_after([](json& j) { j["format"] = "other"; }).find("not a gpt-zeropp checkpoint") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j.erase("seed"); }).find("missing field seed") != std::string::npos);
  CHECK(error_after([](json& j) { j["iteration"] = 4.5; }).find("iteration is 4.5") != std::string::npos);
  CHECK(error_after([](json& j) { j["iteration"] = -1; }).find("iteration is -1") != std::string::npos);
  CHECK(error_after([](json& j) { j["loss_scaler"]["scale"] = 0; }).find("loss_scaler.scale") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["model"]["heads"] = 3; }).find("not divisible") != std::string::npos);
  CHECK(error_after([](json& j) { j["model"]["hidden"] = 1 << 30; }).find("model.hidden") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["zero"]["precision"] = "fp8"; }).find("zero.precision") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["num_shards"] = 2; }).find("num_shards") != std::string::npos);
  CHECK(error_after([](json& j) { j["units"].erase(1); }).find("units has 4 entries") != std::string::npos);
  CHECK(error_after([](json& j) { j["units"][2]["shard_offset"] = 0; }).find("units[2].shard_offset") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["units"][0]["shard"] = 0; }).find("units[0].shard") != std::string::npos);
  CHECK(error_after([](json& j) { j["shard_total"] = 1LL << 40; }).find("shard_total") != std::string::npos);
  CHECK(error_after([](json& j) { j["files"][1]["name"] = "../../etc/passwd"; }).find("files[1].name") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["files"][0]["sha256"] = "XYZ"; }).find("files[0].sha256") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["files"][3]["bytes"] = 12; }).find("files[3].bytes") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["files"].erase(3); }).find("files has 3 entries") != std::string::npos);
}

TEST_CASE("a pipelined run's manifest lists each stage's partition and files") {
  const std::string text = manifest_text(tiny_manifest(2));
  const CheckpointManifest back = parse_manifest(text, "m");
  CHECK(manifest_text(back) == text);
  CHECK(back.pipeline.stages == 2);
  CHECK(back.num_shards() == 4);
  CHECK(back.data_parallel() == 4);
  REQUIRE(back.stages.size() == 2);
  // wte on both stages (the tied head), wpe and h.0 on the first, h.1 and ln_f on the last.
  const auto numel = [&](int s, int u) { return back.stages[size_t(s)].units[size_t(u)].numel; };
  CHECK((numel(0, 0) > 0 && numel(1, 0) == numel(0, 0)));
  CHECK((numel(0, 1) > 0 && numel(1, 1) == 0 && numel(0, 2) > 0 && numel(1, 2) == 0));
  CHECK((numel(0, 3) == 0 && numel(1, 3) > 0 && numel(0, 4) == 0 && numel(1, 4) > 0));
  CHECK(back.file(1, 0, 3).name == "shard_00003_of_00004_pp_01_of_02.bin");
  CHECK(shard_file_name(3, 8, 1, 2, 1, 4) == "shard_00003_of_00008_tp_01_of_02_pp_01_of_04.bin");
  CHECK(error_after([](json&) {}, 2) == "");
  CHECK(error_after([](json& j) { j["stages"].erase(1); }, 2).find("stages has 1 entries") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["stages"][1]["units"][1]["numel"] = 5; }, 2)
            .find("stages[1].units[1].numel") != std::string::npos);
  CHECK(error_after([](json& j) { j["pipeline"]["stages"] = 3; }, 2).find("pipeline.stages") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["world_size"] = 9; }, 2).find("does not divide world_size") !=
        std::string::npos);
  CHECK(error_after([](json& j) { j["files"][4]["name"] = "shard_00000_of_00004.bin"; }, 2)
            .find("files[4].name") != std::string::npos);
}

TEST_CASE("text that is not a manifest is refused in one line") {
  const std::string texts[] = {"",
                               "{",
                               "[]",
                               R"({"format": "gpt-zeropp checkpoint", "version": 1})",
                               R"({"a": 1e999})",
                               std::string("\0\xff", 2)};
  for (const std::string& text : texts) {
    CHECK_THROWS_AS(parse_manifest(text, "m"), CheckpointError);
  }
}

}  // namespace
}  // namespace gpt
