// Reader and writer of GPT-2 safetensors files in the Hugging Face layout; the format is in
// safetensors_format.h.
#include "model/safetensors_format.h"

#include <sys/stat.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <type_traits>
#include <vector>

#include "base/atomic_file.h"
#include "model/params.h"
#include "tensor/half.h"

namespace gpt {

static_assert(std::endian::native == std::endian::little, "safetensors files are little-endian");

namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = uint64_t(100) << 20;  // the safetensors library's own limit
const char* const kPrefix = "transformer.";

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw ModelFileError(path + ": " + problem);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// Bytes per element of a safetensors dtype name, 0 for a name the format does not have.
size_t element_bytes(const std::string& dtype) {
  static const std::map<std::string, size_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// A linear weight that Conv1D stores [in, out].
bool is_conv1d(const std::string& name) {
  for (const char* suffix :
       {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) return true;
  }
  return false;
}

struct Entry {
  std::string file_name;  // as in the file, prefix included
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data
};

struct Header {
  std::map<std::string, Entry> tensors;  // by name without the "transformer." prefix
  uint64_t data_start = 0;               // 8 + the JSON's length
};

uint64_t file_size_of(const std::string& path, FILE* f) {
  struct stat st {};
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fail(path, "is not a regular file; give a model.safetensors file");
  }
  return uint64_t(st.st_size);
}

// The elements of a JSON array of integers; throws std::invalid_argument for anything else (a float such as
// 3e65 would otherwise be converted to an integer, which is undefined once it is out of range).
template <typename Int>
std::vector<Int> integers_of(const json& array) {
  if (!array.is_array()) throw std::invalid_argument("not an array");
  std::vector<Int> out;
  for (const json& v : array) {
    const bool fits = std::is_signed_v<Int> ? v.is_number_integer() &&
                                                  !(v.is_number_unsigned() && v.get<uint64_t>() > INT64_MAX)
                                            : v.is_number_unsigned();
    if (!fits) throw std::invalid_argument("not an integer");
    out.push_back(v.get<Int>());
  }
  return out;
}

Entry parse_entry(const std::string& path, const std::string& name, const json& value) {
  Entry e;
  e.file_name = name;
  try {
    e.dtype = value.at("dtype").get<std::string>();
    e.shape = integers_of<int64_t>(value.at("shape"));
    const auto offsets = integers_of<uint64_t>(value.at("data_offsets"));
    if (offsets.size() != 2) throw std::invalid_argument("two data_offsets");
    e.begin = offsets[0];
    e.end = offsets[1];
  } catch (const std::exception&) {
    fail(path,
         "the header's entry for " + name +
             " lacks a string dtype, an integer shape or two data_offsets; the file is not safetensors");
  }
  uint64_t numel = 1;
  for (int64_t d : e.shape) {
    if (d < 0 || (d > 0 && numel > (uint64_t(1) << 40) / uint64_t(d))) {
      fail(path,
           "tensor " + name + " has the impossible shape " + shape_text(e.shape) + "; the file is corrupt");
    }
    numel *= uint64_t(d);
  }
  const size_t bytes = element_bytes(e.dtype);
  if (bytes == 0)
    fail(path, "tensor " + name + " has the unknown dtype " + e.dtype + "; the file is not safetensors");
  if (e.end < e.begin || e.end - e.begin != numel * bytes) {
    fail(path, "the header gives tensor " + name + " (" + e.dtype + " " + shape_text(e.shape) +
                   ") the byte range [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "), not " +
                   std::to_string(numel * bytes) + " bytes; the header lies about the data");
  }
  return e;
}

// The tensors' byte ranges must tile the data exactly: no holes, no overlaps, nothing past the end.
void check_tiling(const std::string& path, const Header& h, uint64_t data_bytes) {
  std::vector<const Entry*> order;
  for (const auto& [name, e] : h.tensors) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const Entry* a, const Entry* b) { return a->begin < b->begin; });
  uint64_t at = 0;
  for (const Entry* e : order) {
    if (e->begin != at) {
      fail(path, "tensor " + e->file_name + " starts at data byte " + std::to_string(e->begin) + " where " +
                     std::to_string(at) +
                     " was expected (a hole or an overlap); the header lies about the data");
    }
    at = e->end;
  }
  if (at != data_bytes) {
    fail(path, "the tensors cover " + std::to_string(at) + " bytes of data but the file holds " +
                   std::to_string(data_bytes) +
                   " after its header; the file is truncated or has extra bytes");
  }
}

Header read_header(const std::string& path, FILE* f) {
  const uint64_t size = file_size_of(path, f);
  uint64_t length = 0;
  if (size < 8 || std::fread(&length, 8, 1, f) != 1)
    fail(path, "is shorter than a safetensors header; the file is truncated");
  if (length > kMaxHeaderBytes || length > size - 8) {
    fail(path, "announces a " + std::to_string(length) + "-byte header in a " + std::to_string(size) +
                   "-byte file; the file is truncated or not safetensors");
  }
  std::string text(length, '\0');
  if (std::fread(text.data(), 1, length, f) != length)
    fail(path, "cannot read its header; the file is truncated");
  json parsed;
  try {
    parsed = json::parse(text);
  } catch (const json::exception& e) {
    fail(path,
         std::string("its header is not JSON (") + e.what() + "); the file is corrupt or not safetensors");
  }
  if (!parsed.is_object()) fail(path, "its header is not a JSON object; the file is not safetensors");
  Header h;
  h.data_start = 8 + length;
  for (const auto& [name, value] : parsed.items()) {
    if (name == "__metadata__") continue;
    std::string key = name.rfind(kPrefix, 0) == 0 ? name.substr(std::strlen(kPrefix)) : name;
    if (!h.tensors.emplace(key, parse_entry(path, name, value)).second) {
      fail(path, "holds " + key + " twice (with and without the transformer. prefix); keep one");
    }
  }
  check_tiling(path, h, size - h.data_start);
  return h;
}

// A tensor's values widened to fp32 (F32, F16 or BF16 only).
std::vector<float> read_values(const std::string& path, FILE* f, const Header& h, const Entry& e) {
  if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16") {
    fail(path, "tensor " + e.file_name + " is " + e.dtype + "; GPT-2 weights must be F32, F16 or BF16");
  }
  const uint64_t bytes = e.end - e.begin, n = bytes / element_bytes(e.dtype);
  std::vector<char> raw(bytes);
  if (std::fseek(f, long(h.data_start + e.begin), SEEK_SET) != 0 ||
      std::fread(raw.data(), 1, bytes, f) != bytes) {
    fail(path, "cannot read tensor " + e.file_name + " at byte " + std::to_string(h.data_start + e.begin) +
                   "; the file is truncated");
  }
  std::vector<float> values(n);
  if (e.dtype == "F32") {
    std::memcpy(values.data(), raw.data(), bytes);
  } else {
    std::vector<uint16_t> halves(n);
    std::memcpy(halves.data(), raw.data(), bytes);
    if (e.dtype == "F16") f16_to_f32(halves.data(), values.data(), int64_t(n));
    if (e.dtype == "BF16") bf16_to_f32(halves.data(), values.data(), int64_t(n));
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) {
      fail(path, "tensor " + e.file_name + " holds a NaN or infinity at element " + std::to_string(i) +
                     "; the weights are broken");
    }
  }
  return values;
}

const Entry& require(const std::string& path, const Header& h, const std::string& name) {
  const auto it = h.tensors.find(name);
  if (it == h.tensors.end())
    fail(path, "has no tensor " + name + " (nor transformer." + name + "); it is not a GPT-2 model");
  return it->second;
}

// The head count: config.json's n_head beside the file, or `heads`; config.json's other sizes must match the
// tensors.
int head_count(const std::string& path, const GPTConfig& from_tensors, int heads) {
  const std::string config_path = config_json_beside(path);
  std::ifstream in(config_path);
  if (!in) {
    if (heads > 0) return heads;
    fail(path,
         "the head count cannot be read from the tensors and there is no config.json beside it; pass "
         "--num-attention-heads or put the hub's config.json in the same directory");
  }
  json c;
  try {
    c = json::parse(in);
  } catch (const json::exception& e) {
    fail(config_path,
         std::string("is not JSON (") + e.what() + "); fix it or remove it and pass --num-attention-heads");
  }
  const std::pair<const char*, int> sizes[] = {{"n_layer", from_tensors.num_layers},
                                               {"n_embd", from_tensors.hidden},
                                               {"n_positions", from_tensors.max_positions},
                                               {"vocab_size", from_tensors.vocab}};
  for (const auto& [key, value] : sizes) {
    if (c.contains(key) && (!c[key].is_number_integer() || c[key].get<int64_t>() != value)) {
      fail(config_path, std::string(key) + " is " + c[key].dump() + " but the tensors of " + path + " say " +
                            std::to_string(value) + "; use the config.json that belongs to the model");
    }
  }
  if (!c.contains("n_head") || !c["n_head"].is_number_integer()) {
    fail(config_path, "has no integer n_head; add it or remove the file and pass --num-attention-heads");
  }
  const int n_head = c["n_head"].get<int>();
  if (heads > 0 && heads != n_head) {
    fail(config_path, "says n_head " + std::to_string(n_head) + " but --num-attention-heads is " +
                          std::to_string(heads) + "; drop the flag or make them agree");
  }
  return n_head;
}

// The shape from wte, wpe and the block names.
GPTConfig shape_from_tensors(const std::string& path, const Header& h) {
  const Entry& wte = require(path, h, "wte.weight");
  const Entry& wpe = require(path, h, "wpe.weight");
  if (wte.shape.size() != 2 || wpe.shape.size() != 2 || wpe.shape[1] != wte.shape[1]) {
    fail(path, "wte.weight " + shape_text(wte.shape) + " and wpe.weight " + shape_text(wpe.shape) +
                   " are not [V, C] and [maxT, C]; it is not a GPT-2 model");
  }
  const std::regex block(R"(h\.(\d+)\..*)");
  std::set<int> layers;
  for (const auto& [name, e] : h.tensors) {
    std::smatch m;
    if (std::regex_match(name, m, block)) layers.insert(std::stoi(m[1]));
  }
  if (!layers.empty() && *layers.rbegin() != int(layers.size()) - 1) {
    fail(path,
         "its blocks are not numbered 0 .. " + std::to_string(layers.size() - 1) + "; a block is missing");
  }
  GPTConfig c;
  c.num_layers = int(layers.size());
  c.hidden = int(wte.shape[1]);
  c.vocab = int(wte.shape[0]);
  c.max_positions = int(wpe.shape[0]);
  c.seq_len = c.max_positions;
  return c;
}

// The hub's name of a parameter: ours, but the embeddings are "wte.weight" and "wpe.weight".
std::string hub_name(const ParamInfo& p) {
  return p.unit == ParamTable::kWte || p.unit == ParamTable::kWpe ? p.name + ".weight" : p.name;
}

// The shape the hub stores a parameter in.
std::vector<int64_t> hub_shape(const ParamInfo& p, const GPTConfig& c) {
  if (p.unit == ParamTable::kWte) return {c.vocab, c.hidden};
  if (is_conv1d(p.name)) return {p.shape[1], p.shape[0]};
  return p.shape;
}

// dst [cols, rows] = src [rows, cols] transposed: Conv1D's [in, out] to our [out, in], and back.
void transpose_into(const float* src, int64_t rows, int64_t cols, float* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
}

// values (hub layout) into the model layout at p.
void place(const ParamInfo& p, const std::vector<float>& values, float* params) {
  if (is_conv1d(p.name)) {
    transpose_into(values.data(), p.shape[1], p.shape[0], params + p.offset);
  } else {
    std::copy(values.begin(), values.end(), params + p.offset);  // wte's padding rows stay zero
  }
}

bool ignored(const std::string& name) {
  static const std::regex mask(R"(h\.\d+\.attn\.(bias|masked_bias))");
  return std::regex_match(name, mask);
}

void check_lm_head(const std::string& path, FILE* f, const Header& h, const GPTConfig& c, const float* wte) {
  const auto it = h.tensors.find("lm_head.weight");
  if (it == h.tensors.end()) return;
  const std::vector<float> head = read_values(path, f, h, it->second);
  const std::vector<int64_t> expected = {c.vocab, c.hidden};
  if (it->second.shape != expected || !std::equal(head.begin(), head.end(), wte)) {
    fail(path,
         "lm_head.weight differs from wte.weight; GPT-2 ties them, and an untied output layer is not "
         "supported");
  }
}

}  // namespace

bool is_safetensors_file(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return false;
  unsigned char start[9];
  if (std::fread(start, 1, 9, f.get()) != 9) return false;
  uint64_t length = 0;
  std::memcpy(&length, start, 8);
  return start[8] == '{' && length >= 2 && length <= kMaxHeaderBytes;
}

std::string config_json_beside(const std::string& model_path) {
  const size_t slash = model_path.rfind('/');
  return (slash == std::string::npos ? std::string() : model_path.substr(0, slash + 1)) + "config.json";
}

LlmcModel read_safetensors_model(const std::string& path, int heads) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) fail(path, std::string("cannot open model file (") + std::strerror(errno) + "); check the path");
  const Header h = read_header(path, f.get());
  LlmcModel model;
  model.config = shape_from_tensors(path, h);
  model.config.heads = head_count(path, model.config, heads);
  if (std::string problem = model.config.validate(); !problem.empty())
    fail(path, "its shape is invalid: " + problem);
  const ParamTable table = make_param_table(model.config);
  model.params.assign(size_t(table.total), 0.0f);
  std::set<std::string> used;
  for (const ParamInfo& p : table.params) {
    const Entry& e = require(path, h, hub_name(p));
    if (e.shape != hub_shape(p, model.config)) {
      fail(path, "tensor " + e.file_name + " is " + shape_text(e.shape) + ", not " +
                     shape_text(hub_shape(p, model.config)) +
                     " as the other tensors imply; the file is not a consistent GPT-2 model");
    }
    place(p, read_values(path, f.get(), h, e), model.params.data());
    used.insert(hub_name(p));
  }
  for (const auto& [name, e] : h.tensors) {
    if (!used.count(name) && name != "lm_head.weight" && !ignored(name)) {
      fail(path, "holds the unexpected tensor " + e.file_name + "; it is not a GPT-2 model of this layout");
    }
  }
  check_lm_head(path, f.get(), h, model.config, model.params.data() + table.params[0].offset);
  return model;
}

void write_safetensors_model(const std::string& path, const GPTConfig& config,
                             std::span<const float> params) {
  const ParamTable table = make_param_table(config);
  if (int64_t(params.size()) != table.total) {
    throw std::invalid_argument("write_safetensors_model: " + std::to_string(params.size()) +
                                " parameters, expected " + std::to_string(table.total));
  }
  json header;
  header["__metadata__"] = {{"format", "pt"}};
  std::string data;
  for (const ParamInfo& p : table.params) {
    const std::vector<int64_t> shape = hub_shape(p, config);
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> values(static_cast<size_t>(numel));
    const float* src = params.data() + p.offset;
    if (is_conv1d(p.name)) {
      transpose_into(src, p.shape[0], p.shape[1], values.data());
    } else {
      std::copy(src, src + numel, values.begin());  // wte: the first V rows, without the padding
    }
    if (!std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); })) {
      fail(path, "parameter " + p.name + " holds a NaN or infinity; refusing to write broken weights");
    }
    header[hub_name(p)] = {
        {"dtype", "F32"}, {"shape", shape}, {"data_offsets", {data.size(), data.size() + values.size() * 4}}};
    data.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the hub's files do
  const uint64_t length = text.size();
  std::string bytes(reinterpret_cast<const char*>(&length), 8);
  bytes += text;
  bytes += data;
  if (std::string reason = write_file_atomically(path, bytes); !reason.empty()) {
    fail(path, "cannot write model file (" + reason + "); check free disk space and permissions");
  }
  const json hub_config = {{"architectures", {"GPT2LMHeadModel"}},
                           {"model_type", "gpt2"},
                           {"activation_function", "gelu_new"},
                           {"layer_norm_epsilon", 1e-5},
                           {"n_layer", config.num_layers},
                           {"n_head", config.heads},
                           {"n_embd", config.hidden},
                           {"n_positions", config.max_positions},
                           {"n_ctx", config.max_positions},
                           {"vocab_size", config.vocab},
                           {"tie_word_embeddings", true},
                           {"torch_dtype", "float32"}};
  const std::string config_path = config_json_beside(path);
  if (std::string reason = write_file_atomically(config_path, hub_config.dump(2) + "\n"); !reason.empty()) {
    fail(config_path, "cannot write (" + reason + "); check free disk space and permissions");
  }
}

}  // namespace gpt
