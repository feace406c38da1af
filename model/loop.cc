// LayerLoop: GPT-2's forward and backward over gather units; see loop.h.
#include "model/loop.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

namespace gpt {

namespace {

constexpr BlockLinear kForwardOrder[] = {BlockLinear::kQkv, BlockLinear::kAttnProj, BlockLinear::kFc,
                                         BlockLinear::kFcProj};
constexpr BlockLinear kBackwardOrder[] = {BlockLinear::kFcProj, BlockLinear::kFc, BlockLinear::kAttnProj,
                                          BlockLinear::kQkv};

void append_tiles(std::vector<int>& out, const BlockUnits& b, BlockLinear linear) {
  for (int k = 0; k < b.tiles; ++k) out.push_back(b.tile(linear, k));
}

void append_smalls(std::vector<int>& out, const BlockUnits& b) {
  for (int i = 0; i < BlockUnits::kSmallUnits; ++i) out.push_back(b.small(i));
}

// A block's units in the backward, and the order its gradients become final; recompute: the block is the
// last of a recomputed chunk (see loop.h).
void append_block_backward(LoopSchedule& s, const BlockUnits& b, bool recompute) {
  if (b.tiles == 1) {
    s.backward.push_back(b.first);
    s.gradients.push_back(b.first);
    return;
  }
  append_smalls(s.backward, b);
  if (recompute) {  // the recomputation stops before the MLP projection
    for (BlockLinear linear : {BlockLinear::kQkv, BlockLinear::kAttnProj, BlockLinear::kFc})
      append_tiles(s.backward, b, linear);
  }
  for (BlockLinear linear : kBackwardOrder) {
    append_tiles(s.backward, b, linear);
    append_tiles(s.gradients, b, linear);
  }
  for (int i = BlockUnits::kSmallUnits - 1; i >= 0; --i) s.gradients.push_back(b.small(i));
}

// A block's units in the forward (also a recomputed chunk's inner blocks in the backward).
void append_block_forward(std::vector<int>& out, const BlockUnits& b) {
  if (b.tiles == 1) {
    out.push_back(b.first);
    return;
  }
  append_smalls(out, b);
  for (BlockLinear linear : kForwardOrder) append_tiles(out, b, linear);
}

}  // namespace

LoopSchedule loop_schedule(int num_units, int tile_factor, const Recompute& recompute,
                           const std::optional<PipelineChunk>& chunk) {
  // wte, wpe, the blocks, ln_f (params.h)
  const int layers = (num_units - 3) / BlockUnits::of(0, tile_factor).count(), ln_f = num_units - 1;
  const PipelineChunk c = chunk.value_or(PipelineChunk{0, 0, layers, true, true});
  LoopSchedule s;
  if (c.embedding || c.head) s.forward.push_back(ParamTable::kWte);  // held from the embedding to the head
  if (c.embedding) s.forward.push_back(ParamTable::kWpe);
  for (int l = c.first_layer; l < c.end_layer; ++l)
    append_block_forward(s.forward, BlockUnits::of(l, tile_factor));
  if (c.head) {
    s.forward.push_back(ln_f);
    s.backward = {ln_f, ParamTable::kWte};
    s.gradients = {ln_f};
  }
  for (int l = c.end_layer - 1; l >= c.first_layer; --l) {
    const Recompute::Chunk kept = recompute.chunk_within(l, c.first_layer, c.layers());
    const bool last_of_chunk = !kept.empty() && l == kept.last;
    if (last_of_chunk) {  // the chunk's inner blocks run their forwards again first
      for (int m = kept.first; m < l; ++m) append_block_forward(s.backward, BlockUnits::of(m, tile_factor));
    }
    append_block_backward(s, BlockUnits::of(l, tile_factor), last_of_chunk);
  }
  if (c.embedding) s.gradients.push_back(ParamTable::kWpe);
  if (c.embedding || c.head) s.gradients.push_back(ParamTable::kWte);
  return s;
}

namespace {

// A tiled block's weights from the weight source, and in the backward its gradients into the sink: the small
// units are acquired (and opened) for the whole block, each tile when the block function asks for it.
template <typename Real>
class SourcedTiles final : public BlockWeights<Real> {
 public:
  SourcedTiles(const BlockUnits& units, int C, WeightSource<Real>& weights)
      : units_(units), C_(C), weights_(weights) {
    WeightView small[BlockUnits::kSmallUnits];
    for (int i = 0; i < BlockUnits::kSmallUnits; ++i) small[i] = weights_.acquire(units_.small(i));
    small_ = arrange(small);
  }
  int tiles() const override { return units_.tiles; }
  BlockParams<WeightView> small() override { return small_; }
  BlockParams<Real*> small_gradients() override { return small_gradients_; }
  // From here on the block runs its backward: gradients open, and each tile's is final when it is done.
  void begin_backward(GradientSink<Real>& gradients) {
    gradients_ = &gradients;
    Real* small[BlockUnits::kSmallUnits];
    for (int i = 0; i < BlockUnits::kSmallUnits; ++i) small[i] = gradients.open(units_.small(i));
    small_gradients_ = arrange(small);
  }
  WeightView matrix(BlockLinear linear, int k) override { return weights_.acquire(units_.tile(linear, k)); }
  Real* matrix_gradient(BlockLinear linear, int k) override {
    return gradients_->open(units_.tile(linear, k));
  }
  void matrix_done(BlockLinear linear, int k) override {
    weights_.release(units_.tile(linear, k));
    if (gradients_) gradients_->ready(units_.tile(linear, k));
  }
  // The block is done: its small units are released (and their gradients final, in reverse unit order).
  void finish() {
    for (int i = 0; i < BlockUnits::kSmallUnits; ++i) weights_.release(units_.small(i));
    if (!gradients_) return;
    for (int i = BlockUnits::kSmallUnits - 1; i >= 0; --i) gradients_->ready(units_.small(i));
  }

 private:
  // The LayerNorms and biases of the five small units (params.h, BlockUnits).
  template <typename Ptr>
  BlockParams<Ptr> arrange(Ptr const (&small)[BlockUnits::kSmallUnits]) const {
    BlockParams<Ptr> p{};
    p.ln1_w = small[0];
    p.ln1_b = small[0] + C_;
    p.qkv_b = small[1];
    p.attn_proj_b = small[2];
    p.ln2_w = small[2] + C_;
    p.ln2_b = small[2] + 2 * C_;
    p.fc_b = small[3];
    p.fc_proj_b = small[4];
    return p;
  }

  BlockUnits units_;
  int C_;
  WeightSource<Real>& weights_;
  GradientSink<Real>* gradients_ = nullptr;
  BlockParams<WeightView> small_{};
  BlockParams<Real*> small_gradients_{};
};

// Which slot of the residual stream and which activation set each block uses (loop.h's members).
struct Slots {
  std::vector<int> residual;   // L+1
  std::vector<int> block;      // L
  std::vector<int> partition;  // L+1: the kept part of a chunk's first input (partitioned), or -1
  int residuals = 0, blocks = 0, partitions = 0;
};

// kept_away: the chunks' first inputs are kept away from the residual slots (partitioned or in host memory,
// loop.h), their whole tensors in two slots taken in turn (a chunk's last block reads one while it writes
// the next chunk's input into the other).
Slots plan_slots(const Recompute& recompute, int L, bool kept_away) {
  Slots s;
  s.residual.resize(L + 1);
  s.block.resize(L);
  s.partition.assign(L + 1, -1);
  const int shared = recompute.longest_chunk(L);  // activation sets, and inner inputs + 1, of any chunk
  s.blocks = shared;
  s.residuals = std::max(shared - 1, 0);
  const int first_inputs = s.residuals;
  if (kept_away) s.residuals += 2;
  for (int l = 0; l <= L; ++l) {
    const Recompute::Chunk chunk = l < L ? recompute.chunk(l, L) : Recompute::Chunk{};
    if (l < L) s.block[l] = chunk.empty() ? s.blocks++ : l - chunk.first;
    // A chunk's first input is kept (whole, or as this rank's part); its inner inputs are recomputed into
    // the shared slots.
    if (!chunk.empty() && l == chunk.first && kept_away) {
      s.residual[l] = first_inputs + s.partitions % 2;
      s.partition[l] = s.partitions++;
    } else {
      s.residual[l] = chunk.empty() || l == chunk.first ? s.residuals++ : l - chunk.first - 1;
    }
  }
  return s;
}

}  // namespace

template <typename Real>
LayerLoop<Real>::LayerLoop(const GPTConfig& config, int micro_batch, const Recompute& recompute, Ops& ops,
                           Arena& arena, int tile_factor, const TensorParallel& tensor_parallel,
                           const std::optional<PipelineChunk>& chunk, DType compute)
    : config_(config),
      table_(make_param_table(config, tile_factor, tensor_parallel.slice())),
      schedule_(loop_schedule(int(table_.units.size()), tile_factor, recompute, chunk)),
      chunk_(chunk.value_or(PipelineChunk{0, 0, config.num_layers, true, true})),
      B_(micro_batch),
      T_(config.seq_len),
      recompute_(recompute),
      ops_(ops),
      arena_(arena),
      compute_(compute),
      tp_(tensor_parallel) {
  const int64_t B = B_, T = tp_.local_positions(T_), C = config.hidden;
  const DType dtype = compute;
  auto allocate = [&](std::vector<int64_t> shape, DType type) {
    return arena.allocate_tensor("activation", "activations", std::move(shape), type);
  };
  partitioned_ = tp_.distribute_saved_activations && tp_.size() > 1;
  if ((partitioned_ || recompute.checkpoints_on_host) && (!recompute.is_full() || tp_.sequence_parallel)) {
    throw std::invalid_argument(
        "partitioned or host-memory activation checkpoints need full recomputation and no sequence "
        "parallelism");
  }
  // The chunk's layers only, counted from its first: a pipeline stage keeps no other layer's inputs, and
  // full recomputation's chunks of blocks are counted in each stage, as Megatron counts them.
  const Slots slots = plan_slots(recompute, chunk_.layers(), partitioned_ || recompute.checkpoints_on_host);
  residual_slot_ = slots.residual;
  block_slot_ = slots.block;
  partition_slot_ = slots.partition;
  residual_ = allocate({slots.residuals, B, T, C}, dtype);
  const int64_t kept = B * T * C / (partitioned_ ? tp_.size() : 1);  // elements of one kept checkpoint
  if (slots.partitions > 0 && recompute.checkpoints_on_host) {
    host_checkpoints_.resize(dtype_bytes(dtype, slots.partitions * kept));
    if (partitioned_) partitions_ = allocate({1, kept}, dtype);  // the way back to the device, then gathered
  } else if (slots.partitions > 0) {
    partitions_ = allocate({slots.partitions, kept}, dtype);
  }
  blocks_.resize(std::max(slots.blocks, 1));  // evaluation uses set 0
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const bool own_probs = i == 0 || !recompute.is_selective();
    blocks_[i].allocate(arena, dtype, config, B_, T_, own_probs, tp_, ops.attention_residual());
    if (!own_probs) blocks_[i].att = blocks_[0].att;
  }
  scratch_.allocate(arena, dtype, config, B_, T_, tp_);
  // The fused classifier where the backend fuses it and the head is not vocabulary-parallel: a chunk of
  // logits instead of the whole [B*T, Vp].
  const bool fused_head = ops.fuses_classifier() && tp_.size() == 1;
  if (chunk_.head)  // a pipeline chunk without the head keeps none of its tensors
    head_.allocate(arena, dtype, config, B_, T_, tp_,
                   fused_head ? classifier_chunk_rows(int64_t(B_) * T_) : 0);
  if (tp_.sequence_parallel) {
    tp_.gathered = allocate({B, T_, C}, dtype);
    tp_.partial = allocate({B, T_, C}, dtype);
    tp_.norm_grads = allocate({2, C}, dtype_of<Real>());  // parameter gradients: Real
  }
  dresidual_ = allocate({B, T, C}, dtype);
  if (recompute.is_full()) recompute_out_ = allocate({B, T, C}, dtype);
  // The micro-batch's tokens on the device: input, not activations.
  inputs_ = arena.allocate_tensor("input tokens", "buffers: tokens", {B, T_}, DType::kI32);
  targets_ = arena.allocate_tensor("target tokens", "buffers: tokens", {B, T_}, DType::kI32);
}

template <typename Real>
Tensor LayerLoop<Real>::residual(int layer) const {
  const int T = tp_.local_positions(T_);
  const int64_t BTC = int64_t(B_) * T * config_.hidden;
  Tensor slot = element_range(residual_, residual_slot_[layer - chunk_.first_layer] * BTC, BTC);
  slot.shape = {B_, T, config_.hidden};
  return slot;
}

template <typename Real>
Tensor LayerLoop<Real>::own_part(int layer) const {
  const Tensor whole = residual(layer);
  const int64_t n = whole.numel() / (partitioned_ ? tp_.size() : 1);
  return element_range(whole, partitioned_ ? tp_.rank() * n : 0, n);
}

template <typename Real>
Tensor LayerLoop<Real>::stored_part(int row) const {
  const int64_t n = partitions_.shape[1];
  return element_range(partitions_, row * n, n);
}

template <typename Real>
void* LayerLoop<Real>::host_part(int slot, int64_t n) {
  return host_checkpoints_.data() + dtype_bytes(compute_, slot * n);
}

template <typename Real>
void LayerLoop<Real>::keep_checkpoint(int layer) {
  const int slot = partition_slot_[layer - chunk_.first_layer];
  if (slot < 0) return;
  const Tensor mine = own_part(layer);
  if (host_checkpoints_.empty()) {
    ops_.copy(stored_part(slot), mine);
  } else {
    ops_.download(host_part(slot, mine.numel()), mine);
  }
}

template <typename Real>
void LayerLoop<Real>::restore_checkpoint(int layer) {
  const int slot = partition_slot_[layer - chunk_.first_layer];
  if (slot < 0) return;
  const Tensor mine = own_part(layer);
  const bool on_host = !host_checkpoints_.empty();
  if (!partitioned_) {
    ops_.upload(mine, host_part(slot, mine.numel()));
    return;
  }
  // The kept part (from the device store, or brought back from host memory into its one row), then the
  // group's gather.
  const Tensor part = stored_part(on_host ? 0 : slot);
  if (on_host) ops_.upload(part, host_part(slot, part.numel()));
  const Tensor whole = residual(layer);
  tp_.group->all_gather(Tensor{whole.data, {whole.numel()}, whole.dtype, whole.device}, part,
                        TensorTraffic::kActivationGather);
}

template <typename Real>
Dropout LayerLoop<Real>::dropout() const {
  Dropout d = dropout_;
  d.windows = windows_.empty() ? nullptr : windows_.data();
  return d;
}

template <typename Real>
Real LayerLoop<Real>::forward(WeightSource<Real>& weights, const int32_t* inputs, const int32_t* targets,
                              const Dropout& dropout, bool keep_for_backward) {
  const int L = config_.num_layers, C = config_.hidden;
  if (inputs) ops_.upload(inputs_, inputs);  // a chunk without the embedding may have none
  has_targets_ = targets != nullptr;
  if (has_targets_) ops_.upload(targets_, targets);
  // The fused head keeps no logits; a forward without targets hands them all out, so it gets them (once).
  if (!has_targets_ && head_.probs.empty()) head_.allocate_probs(arena_, compute_, config_, B_, T_);
  dropout_ = dropout;
  if (dropout.windows) {
    windows_.assign(dropout.windows, dropout.windows + B_);
  } else {
    windows_.clear();
  }
  const Dropout drop = this->dropout();
  tp_.traffic = TensorTraffic::kForward;
  weights.begin_pass(Pass::kForward, schedule_.forward);
  const WeightView wte = chunk_.embedding || chunk_.head ? weights.acquire(ParamTable::kWte) : WeightView{};
  if (chunk_.embedding) {
    const WeightView wpe = weights.acquire(ParamTable::kWpe);
    embed_forward(ops_, config_, wte, wpe, inputs_, residual(0), drop, tp_);
    weights.release(ParamTable::kWpe);
  }
  // A block whose activations the backward recomputes (or an evaluation) computes into a shared set. Each
  // block's output may wait for its consumer's LayerNorm to add the block's r2 (block_output()).
  Tensor pending;
  for (int l = chunk_.first_layer; l < chunk_.end_layer; ++l) {
    if (keep_for_backward) keep_checkpoint(l);
    pending = forward_block(weights, l, keep_for_backward ? activations(l) : blocks_[0], drop, pending);
  }
  Real loss = 0;
  if (chunk_.head) {
    const int lnf_unit = table_.final_norm_unit();
    const WeightView lnf = weights.acquire(lnf_unit);
    loss = static_cast<Real>(head_forward(ops_, config_, lnf, lnf + C, wte, residual(L),
                                          has_targets_ ? targets_ : Tensor{}, head_, tp_, pending));
    weights.release(lnf_unit);
  }
  if (wte) weights.release(ParamTable::kWte);
  return loss;
}

template <typename Real>
Real* LayerLoop<Real>::backward_head(WeightSource<Real>& weights, GradientSink<Real>& gradients,
                                     Real dloss_per_token) {
  const int lnf_unit = table_.final_norm_unit();
  const WeightView lnf = weights.acquire(lnf_unit);
  const WeightView wte = weights.acquire(ParamTable::kWte);
  Real* dlnf = gradients.open(lnf_unit);
  // wte is tied to the output projection: its gradient stays open until the embedding's backward.
  Real* dwte = gradients.open(ParamTable::kWte);
  head_backward(ops_, config_, lnf, wte, dlnf, dlnf + config_.hidden, dwte, residual(config_.num_layers),
                targets_, head_, dloss_per_token, dresidual_, tp_);
  weights.release(lnf_unit);
  weights.release(ParamTable::kWte);
  gradients.ready(lnf_unit);
  return dwte;
}

template <typename Real>
BlockOutput LayerLoop<Real>::block_output(int layer) const {
  const int next = layer + 1;
  if (next == chunk_.end_layer) return chunk_.head ? BlockOutput::kPending : BlockOutput::kSum;
  return partition_slot_[next - chunk_.first_layer] < 0 ? BlockOutput::kPending : BlockOutput::kSum;
}

template <typename Real>
Tensor LayerLoop<Real>::forward_block(WeightSource<Real>& weights, int layer, BlockActivations& acts,
                                      const Dropout& drop, const Tensor& input_addend) {
  const BlockUnits units = table_.block_units(layer);
  const BlockOutput output = block_output(layer);
  if (units.tiles == 1) {
    WholeBlock<Real> whole(weights.acquire(units.first), nullptr, config_.hidden, tp_.size());
    block_forward(ops_, config_, whole, residual(layer), residual(layer + 1), acts, drop, layer, output, tp_,
                  input_addend);
    weights.release(units.first);
  } else {
    SourcedTiles<Real> tiles(units, config_.hidden, weights);
    block_forward(ops_, config_, tiles, residual(layer), residual(layer + 1), acts, drop, layer, output, tp_,
                  input_addend);
    tiles.finish();
  }
  return output == BlockOutput::kPending ? acts.residual2 : Tensor{};
}

template <typename Real>
void LayerLoop<Real>::backward_block(WeightSource<Real>& weights, GradientSink<Real>& gradients, int layer,
                                     bool recompute, const Tensor& input_addend) {
  if (table_.tile_factor > 1) {
    backward_tiled_block(weights, gradients, layer, recompute, input_addend);
    return;
  }
  const int unit = table_.block_unit(layer);
  const Dropout drop = dropout();
  const WeightView w = weights.acquire(unit);
  BlockActivations& acts = activations(layer);
  if (recompute) {
    // Recompute this block's forward from its saved input, with the weights of this same acquisition.
    WholeBlock<Real> whole(w, nullptr, config_.hidden, tp_.size());
    block_forward(ops_, config_, whole, residual(layer), recompute_out_, acts, drop, layer,
                  BlockOutput::kNone, tp_, input_addend);
  }
  WholeBlock<Real> whole(w, gradients.open(unit), config_.hidden, tp_.size());
  block_backward(ops_, config_, whole, residual(layer), acts, scratch_, dresidual_, drop, layer,
                 recompute_.is_selective(), tp_);
  weights.release(unit);
  gradients.ready(unit);
}

// The tiled block: the small units for the whole block, each tile gathered for its own linear (twice when
// recomputed: recomputation, then backward), so at most one tile of a matrix is held at a time.
template <typename Real>
void LayerLoop<Real>::backward_tiled_block(WeightSource<Real>& weights, GradientSink<Real>& gradients,
                                           int layer, bool recompute, const Tensor& input_addend) {
  const Dropout drop = dropout();
  BlockActivations& acts = activations(layer);
  SourcedTiles<Real> tiles(table_.block_units(layer), config_.hidden, weights);
  if (recompute)
    block_forward(ops_, config_, tiles, residual(layer), recompute_out_, acts, drop, layer,
                  BlockOutput::kNone, tp_, input_addend);
  tiles.begin_backward(gradients);
  block_backward(ops_, config_, tiles, residual(layer), acts, scratch_, dresidual_, drop, layer,
                 recompute_.is_selective(), tp_);
  tiles.finish();
}

template <typename Real>
void LayerLoop<Real>::backward(WeightSource<Real>& weights, GradientSink<Real>& gradients,
                               Real loss_multiplier) {
  const Dropout drop = dropout();
  tp_.traffic = TensorTraffic::kBackward;  // the recomputation's collectives too
  weights.begin_pass(Pass::kBackward, schedule_.backward);
  // Without the head, dresidual_ holds the chunk output's gradient (boundary_gradient(), set by the caller).
  Real* dwte =
      chunk_.head ? backward_head(weights, gradients, loss_multiplier / static_cast<Real>(B_ * T_)) : nullptr;
  for (int l = chunk_.end_layer - 1; l >= chunk_.first_layer; --l) {
    const Recompute::Chunk chunk = recompute_.chunk_within(l, chunk_.first_layer, chunk_.layers());
    const bool last_of_chunk = !chunk.empty() && l == chunk.last;
    // Full recomputation: a chunk's inner blocks run their forwards again from the chunk's kept input (the
    // sum: its LayerNorm wrote it back in the forward), each into its own activation set and the next one's
    // input; the last block recomputes with its backward.
    Tensor pending;
    if (last_of_chunk) {
      restore_checkpoint(chunk.first);
      for (int m = chunk.first; m < l; ++m)
        pending = forward_block(weights, m, activations(m), drop, pending);
    }
    backward_block(weights, gradients, l, last_of_chunk, pending);
  }
  // The embedding's backward needs no weights: it scatters into wte's open gradient and into wpe's.
  // The masked gradient borrows a block temporary, free once the blocks are done. Without the embedding,
  // dresidual_ is left holding the chunk input's gradient for the previous stage.
  if (chunk_.embedding) {
    if (!dwte) dwte = gradients.open(ParamTable::kWte);
    embed_backward(ops_, config_, dwte, gradients.open(ParamTable::kWpe), inputs_, dresidual_, scratch_.d_ln1,
                   drop, tp_);
    gradients.ready(ParamTable::kWpe);
  }
  if (dwte) gradients.ready(ParamTable::kWte);
}

template <typename Real>
size_t LayerLoop<Real>::activation_bytes() const {
  size_t total = residual_.nbytes() + dresidual_.nbytes() +
                 (recompute_.is_full() ? recompute_out_.nbytes() : 0) + scratch_.bytes() +
                 (chunk_.head ? head_.bytes() : 0);
  if (tp_.sequence_parallel) total += tp_.gathered.nbytes() + tp_.partial.nbytes() + tp_.norm_grads.nbytes();
  if (partitions_.data) total += partitions_.nbytes();
  for (const auto& block : blocks_) total += block.bytes();
  return total;
}

template class LayerLoop<float>;
template class LayerLoop<double>;

}  // namespace gpt
