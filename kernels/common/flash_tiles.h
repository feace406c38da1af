// FlashAttention-2's tile sizes, one definition for the CPU reference (kernels/cpu/flash_attention.h) and the
// CUDA kernels (kernels/cuda/flash_attention.cu): the tile sizes decide the summation order (every sum over
// keys or queries is a tile's chain plus one step per tile), so the two agree only if they share them.
#pragma once

namespace gpt {

// Br (query rows per tile) and Bc (key columns per tile). The CUDA kernels map 256 threads onto 64 x 64
// tiles (and static_assert it); the CPU reference takes any positive sizes.
inline constexpr int kFlashTileRows = 64;
inline constexpr int kFlashTileCols = 64;

}  // namespace gpt
