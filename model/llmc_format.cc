// Reader, writer and layout converters of llm.c's fp32 GPT-2 model file; the format is in llmc_format.h.
#include "model/llmc_format.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

namespace gpt {

static_assert(std::endian::native == std::endian::little, "llm.c model files are little-endian");

namespace {

struct FileCloser {
  void operator()(FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<FILE, FileCloser>;

std::string str(int64_t v) {
  return std::to_string(v);
}

int64_t byte_offset(int64_t body_element) {
  return kLlmcHeaderBytes + 4 * body_element;
}

// The twelve per-layer tensors of a block in llm.c's order, with their names in both conventions and their
// size in units of C.
struct BlockTensorKind {
  const char* llmc_name;
  const char* model_suffix;
  int64_t c_squared, c_linear;  // numel per layer = c_squared C^2 + c_linear C
};
constexpr std::array<BlockTensorKind, 12> kBlockKinds = {{
    {"ln1w", "ln_1.weight", 0, 1},
    {"ln1b", "ln_1.bias", 0, 1},
    {"qkvw", "attn.c_attn.weight", 3, 0},
    {"qkvb", "attn.c_attn.bias", 0, 3},
    {"attprojw", "attn.c_proj.weight", 1, 0},
    {"attprojb", "attn.c_proj.bias", 0, 1},
    {"ln2w", "ln_2.weight", 0, 1},
    {"ln2b", "ln_2.bias", 0, 1},
    {"fcw", "mlp.c_fc.weight", 4, 0},
    {"fcb", "mlp.c_fc.bias", 0, 4},
    {"fcprojw", "mlp.c_proj.weight", 4, 0},
    {"fcprojb", "mlp.c_proj.bias", 0, 1},
}};

// Plausibility limits of a header (the same ranges gpt_train's flags accept); they also keep every size
// below in int64 range, so a corrupt header is reported instead of allocating or overflowing.
std::string shape_problem(int64_t maxT, int64_t V, int64_t L, int64_t NH, int64_t C, int64_t Vp) {
  struct Field {
    const char* what;
    int64_t value, max, offset;
  };
  const Field fields[] = {
      {"maxT (positions)", maxT, 1 << 20, 8}, {"V (vocabulary)", V, 1 << 24, 12},
      {"L (layers)", L, 1 << 16, 16},         {"NH (heads)", NH, 1 << 16, 20},
      {"C (width)", C, 1 << 20, 24},          {"Vp (padded vocabulary)", Vp, 1 << 24, 28}};
  for (const Field& f : fields) {
    if (f.value < 1 || f.value > f.max) {
      return f.what + std::string(" is ") + str(f.value) + " at byte offset " + str(f.offset) +
             ", outside [1, " + str(f.max) + "]";
    }
  }
  if (C % NH != 0) {
    return "C " + str(C) + " (byte offset 24) is not divisible by NH " + str(NH) + " (byte offset 20)";
  }
  const int64_t rounded = (V + 127) / 128 * 128;
  if (Vp != rounded) {
    return "Vp " + str(Vp) + " at byte offset 28 is not V " + str(V) + " rounded up to a multiple of 128 (" +
           str(rounded) + "), the padding llm.c and this project use";
  }
  return "";
}

File open_for_reading(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) {
    throw ModelFileError(path + ": cannot open model file (" + std::strerror(errno) +
                         "); check the path (an llm.c GPT-2 .bin file, version 3)");
  }
  struct stat st {};
  if (fstat(fileno(f.get()), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw ModelFileError(path + ": is not a regular file; give an llm.c GPT-2 model file (.bin)");
  }
  return f;
}

// Reads and checks the header against the file's length; returns the shape.
GPTConfig read_header(const std::string& path, FILE* f) {
  struct stat st {};
  fstat(fileno(f), &st);
  const int64_t size = st.st_size;
  const std::string remake = "; re-create it with gpt_export or llm.c's train_gpt2.py";
  if (size < kLlmcHeaderBytes) {
    throw ModelFileError(path + ": file is " + str(size) + " bytes, shorter than the " +
                         str(kLlmcHeaderBytes) + "-byte header (ends at byte offset " + str(size) +
                         "); not an llm.c model file" + remake);
  }
  std::array<int32_t, kLlmcHeaderInts> h{};
  if (std::fread(h.data(), 4, h.size(), f) != h.size()) {
    throw ModelFileError(path + ": read error in the header at byte offset 0 (" + std::strerror(errno) + ")");
  }
  if (h[0] != kLlmcMagic) {
    throw ModelFileError(path + ": wrong magic " + str(h[0]) + " at byte offset 0 (expected " +
                         str(kLlmcMagic) + "); not an llm.c GPT-2 model file" + remake);
  }
  if (h[1] != kLlmcVersion) {
    const std::string hint = h[1] == 5 ? " (version 5 is llm.c's bf16 file; use the fp32 one, version 3, "
                                         "which train_gpt2.py writes beside it)"
                                       : "";
    throw ModelFileError(path + ": unsupported version " + str(h[1]) + " at byte offset 4 (expected " +
                         str(kLlmcVersion) + ", fp32)" + hint + remake);
  }
  if (std::string problem = shape_problem(h[2], h[3], h[4], h[5], h[6], h[7]); !problem.empty()) {
    throw ModelFileError(path + ": bad header: " + problem + remake);
  }
  GPTConfig config;
  config.max_positions = config.seq_len = h[2];
  config.vocab = h[3];
  config.num_layers = h[4];
  config.heads = h[5];
  config.hidden = h[6];
  const int64_t count = llmc_param_count(config);
  const int64_t expected = byte_offset(count);
  const std::string shape = "maxT " + str(h[2]) + ", V " + str(h[3]) + ", L " + str(h[4]) + ", NH " +
                            str(h[5]) + ", C " + str(h[6]) + ", Vp " + str(h[7]);
  if (size < expected) {
    throw ModelFileError(path + ": truncated: the header (" + shape + ") declares " + str(count) +
                         " parameters, so " + str(expected) + " bytes, but the file ends at byte offset " +
                         str(size) + "; the copy is incomplete" + remake);
  }
  if (size > expected) {
    throw ModelFileError(path + ": " + str(size - expected) +
                         " unexpected bytes after the last parameter, from byte offset " + str(expected) +
                         " (the header declares " + shape + "); not a version 3 fp32 file" + remake);
  }
  return config;
}

// Problems with values: NaN or infinity anywhere, anything but zero in wte's padding rows. `at` gives the
// byte offset of an element in the file, for the message.
template <typename ByteOffset>
std::string value_problem(const GPTConfig& config, const LlmcTensor& t, const float* values, int64_t first,
                          int64_t count, ByteOffset at) {
  const int64_t padding_begin = t.llmc_name == "wte" ? int64_t(config.vocab) * config.hidden : t.numel;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t i = first + k;  // element within the tensor
    const float v = values[k];
    if (!std::isfinite(v)) {
      return "non-finite value " + std::to_string(v) + " in " + t.llmc_name + " (" + t.model_name +
             ") element " + str(i) + " at byte offset " + str(at(t, i)) +
             "; the model had diverged, export an earlier checkpoint";
    }
    if (i >= padding_begin && v != 0.0f) {
      return "padding row " + str(i / config.hidden) + " of wte (rows V=" + str(config.vocab) +
             " to Vp-1=" + str(config.padded_vocab() - 1) + " must be zero) holds " + std::to_string(v) +
             " at byte offset " + str(at(t, i));
    }
  }
  return "";
}

// Reads model-layout elements [begin, end) into out; the header has been read and checked.
void read_range(const std::string& path, FILE* f, const GPTConfig& config, int64_t begin, int64_t end,
                float* out) {
  const auto file_byte = [](const LlmcTensor& t, int64_t i) { return byte_offset(t.file_offset + i); };
  for (const LlmcTensor& t : llmc_tensors(config)) {
    const int64_t lo = std::max(begin, t.model_offset), hi = std::min(end, t.model_offset + t.numel);
    if (lo >= hi) continue;
    const int64_t first = lo - t.model_offset;  // element within the tensor
    if (fseeko(f, file_byte(t, first), SEEK_SET) != 0) {
      throw ModelFileError(path + ": cannot seek to byte offset " + str(file_byte(t, first)) + " (" +
                           std::strerror(errno) + ")");
    }
    float* dst = out + (lo - begin);
    const size_t n = static_cast<size_t>(hi - lo);
    if (std::fread(dst, 4, n, f) != n) {
      throw ModelFileError(path + ": read error in " + t.llmc_name + " after byte offset " +
                           str(file_byte(t, first)) + " (" + std::strerror(errno) +
                           "); the file changed while it was read, or the disk failed");
    }
    if (std::string problem = value_problem(config, t, dst, first, hi - lo, file_byte); !problem.empty()) {
      throw ModelFileError(path + ": " + problem);
    }
  }
}

}  // namespace

void check_model_shape(const std::string& path, const GPTConfig& file, const GPTConfig& expected) {
  struct Dim {
    const char* what;
    const char* flag;
    int file_value, flag_value;
  };
  const Dim dims[] = {{"layers", "--num-layers", file.num_layers, expected.num_layers},
                      {"hidden size", "--hidden-size", file.hidden, expected.hidden},
                      {"attention heads", "--num-attention-heads", file.heads, expected.heads},
                      {"positions", "--max-position-embeddings", file.max_positions, expected.max_positions},
                      {"vocabulary", "--vocab-size", file.vocab, expected.vocab}};
  std::string differences, fix;
  for (const Dim& d : dims) {
    if (d.file_value == d.flag_value) continue;
    differences += std::string(differences.empty() ? "" : ", ") + d.what + " " + str(d.file_value) +
                   " in the file but " + d.flag + " " + str(d.flag_value);
    fix += std::string(" ") + d.flag + " " + str(d.file_value);
  }
  if (!differences.empty()) {
    throw ModelFileError(path + ": the model file does not match the model flags: " + differences + "; set" +
                         fix + " (or use a file of the flags' shape)");
  }
}

std::vector<LlmcTensor> llmc_tensors(const GPTConfig& config) {
  const int64_t C = config.hidden, L = config.num_layers, Vp = config.padded_vocab();
  const int64_t block = 12 * C * C + 13 * C;  // block_numel(C), the stride of our block units
  const int64_t blocks_begin = (Vp + config.max_positions) * C;
  std::vector<LlmcTensor> tensors;
  int64_t file_offset = 0;
  auto add = [&](const std::string& llmc_name, const std::string& model_name, int64_t model_offset,
                 int64_t numel) {
    tensors.push_back({llmc_name, model_name, file_offset, model_offset, numel});
    file_offset += numel;
  };
  add("wte", "wte", 0, Vp * C);
  add("wpe", "wpe", Vp * C, int64_t(config.max_positions) * C);
  int64_t within_block = 0;  // the kind's offset inside a block unit (block_params() in params.h)
  for (const BlockTensorKind& kind : kBlockKinds) {
    const int64_t numel = kind.c_squared * C * C + kind.c_linear * C;
    for (int64_t l = 0; l < L; ++l) {
      add(kind.llmc_name, "h." + str(l) + "." + kind.model_suffix, blocks_begin + l * block + within_block,
          numel);
    }
    within_block += numel;
  }
  add("lnfw", "ln_f.weight", blocks_begin + L * block, C);
  add("lnfb", "ln_f.bias", blocks_begin + L * block + C, C);
  return tensors;
}

int64_t llmc_param_count(const GPTConfig& config) {
  const int64_t C = config.hidden;
  return (int64_t(config.padded_vocab()) + config.max_positions) * C +
         int64_t(config.num_layers) * (12 * C * C + 13 * C) + 2 * C;
}

void model_to_llmc_order(const GPTConfig& config, std::span<const float> model, std::span<float> llmc) {
  const int64_t count = llmc_param_count(config);
  if (int64_t(model.size()) != count || int64_t(llmc.size()) != count) {
    throw std::invalid_argument("model_to_llmc_order: both layouts must hold " + str(count) + " elements");
  }
  for (const LlmcTensor& t : llmc_tensors(config)) {
    std::copy_n(model.data() + t.model_offset, t.numel, llmc.data() + t.file_offset);
  }
}

void llmc_to_model_order(const GPTConfig& config, std::span<const float> llmc, std::span<float> model) {
  const int64_t count = llmc_param_count(config);
  if (int64_t(model.size()) != count || int64_t(llmc.size()) != count) {
    throw std::invalid_argument("llmc_to_model_order: both layouts must hold " + str(count) + " elements");
  }
  for (const LlmcTensor& t : llmc_tensors(config)) {
    std::copy_n(llmc.data() + t.file_offset, t.numel, model.data() + t.model_offset);
  }
}

GPTConfig read_llmc_header(const std::string& path) {
  File f = open_for_reading(path);
  return read_header(path, f.get());
}

LlmcModel read_llmc_model(const std::string& path) {
  File f = open_for_reading(path);
  LlmcModel model;
  model.config = read_header(path, f.get());
  const int64_t count = llmc_param_count(model.config);
  model.params.resize(static_cast<size_t>(count));
  read_range(path, f.get(), model.config, 0, count, model.params.data());
  return model;
}

void load_llmc_into_model_layout(const std::string& path, const GPTConfig& expected,
                                 std::vector<float>& params) {
  File f = open_for_reading(path);
  const GPTConfig file = read_header(path, f.get());
  check_model_shape(path, file, expected);
  const int64_t count = llmc_param_count(file);
  params.resize(static_cast<size_t>(count));
  read_range(path, f.get(), file, 0, count, params.data());
}

void load_llmc_model_range(const std::string& path, const GPTConfig& expected, int64_t begin, int64_t end,
                           float* out) {
  File f = open_for_reading(path);
  const GPTConfig file = read_header(path, f.get());
  check_model_shape(path, file, expected);
  const int64_t count = llmc_param_count(file);
  if (begin < 0 || end < begin || end > count) {
    throw std::invalid_argument("load_llmc_model_range: [" + str(begin) + ", " + str(end) +
                                ") is not inside the model's " + str(count) + " elements");
  }
  read_range(path, f.get(), file, begin, end, out);
}

void write_llmc_model(const std::string& path, const GPTConfig& config, std::span<const float> params) {
  const int64_t maxT = config.max_positions, V = config.vocab, Vp = config.padded_vocab();
  if (std::string problem = shape_problem(maxT, V, config.num_layers, config.heads, config.hidden, Vp);
      !problem.empty()) {
    throw ModelFileError(path + ": cannot write this model's shape: " + problem);
  }
  const int64_t count = llmc_param_count(config);
  if (int64_t(params.size()) != count) {
    throw std::invalid_argument("write_llmc_model: " + str(params.size()) +
                                " parameters given, the shape has " + str(count));
  }
  const std::vector<LlmcTensor> tensors = llmc_tensors(config);
  // Checked before any byte is written, so a refused model leaves no file behind.
  const auto model_element = [](const LlmcTensor& t, int64_t i) { return t.model_offset + i; };
  for (const LlmcTensor& t : tensors) {
    if (std::string problem =
            value_problem(config, t, params.data() + t.model_offset, 0, t.numel, model_element);
        !problem.empty()) {
      throw ModelFileError(path + ": refusing to write the model: " + problem +
                           " (offsets here count parameters in the model layout)");
    }
  }

  // Same directory, so the rename is atomic; the pid keeps concurrent writers apart.
  const std::string temp = path + ".tmp." + str(getpid());
  File f(std::fopen(temp.c_str(), "wb"));
  if (!f) {
    throw ModelFileError(temp + ": cannot create model file (" + std::strerror(errno) +
                         "); check that the output directory exists and is writable");
  }
  std::array<int32_t, kLlmcHeaderInts> header{};
  header[0] = kLlmcMagic;
  header[1] = kLlmcVersion;
  header[2] = config.max_positions;
  header[3] = config.vocab;
  header[4] = config.num_layers;
  header[5] = config.heads;
  header[6] = config.hidden;
  header[7] = config.padded_vocab();
  bool ok = std::fwrite(header.data(), 4, header.size(), f.get()) == header.size();
  for (const LlmcTensor& t : tensors) {
    if (!ok) break;
    const size_t n = static_cast<size_t>(t.numel);
    ok = std::fwrite(params.data() + t.model_offset, 4, n, f.get()) == n;
  }
  ok = std::fflush(f.get()) == 0 && ok;
  ok = fsync(fileno(f.get())) == 0 && ok;  // the rename must not land before the data does
  const int write_errno = errno;
  ok = std::fclose(f.release()) == 0 && ok;
  if (!ok || std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string reason = std::strerror(ok ? errno : write_errno);
    std::remove(temp.c_str());
    throw ModelFileError(path + ": cannot write model file (" + reason +
                         "); check free disk space and permissions");
  }
}

}  // namespace gpt
