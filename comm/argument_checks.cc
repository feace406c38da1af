// The backends' shared argument checks; see argument_checks.h.
#include "comm/argument_checks.h"

#include <stdexcept>
#include <string>

#include "comm/wire_reduce.h"

namespace gpt::comm {

void require_reducible(DType dtype, const char* what) {
  if (!is_reducible(dtype)) {
    throw std::invalid_argument(std::string("comm: ") + what + " reduces in f32, f16, bf16 or f64, not " +
                                dtype_name(dtype));
  }
}

void require_buffers(size_t amount, std::initializer_list<const void*> buffers, const char* what) {
  if (amount == 0) return;
  for (const void* buffer : buffers) {
    if (buffer == nullptr) throw std::invalid_argument(std::string("comm: ") + what + " given a null buffer");
  }
}

AllToAllTotals check_all_to_all_v(int rank, int group_size, const std::vector<size_t>& send_bytes,
                                  const std::vector<size_t>& recv_bytes) {
  const size_t n = static_cast<size_t>(group_size);
  if (send_bytes.size() != n || recv_bytes.size() != n) {
    throw std::invalid_argument("comm: all_to_all_v needs one send and one receive size per rank (" +
                                std::to_string(n) + "), got " + std::to_string(send_bytes.size()) + " and " +
                                std::to_string(recv_bytes.size()));
  }
  if (send_bytes[rank] != recv_bytes[rank]) {
    throw std::invalid_argument("comm: all_to_all_v sends " + std::to_string(send_bytes[rank]) +
                                " bytes to itself but expects " + std::to_string(recv_bytes[rank]));
  }
  AllToAllTotals totals;
  for (size_t p = 0; p < n; ++p) {
    totals.sent += send_bytes[p];
    totals.received += recv_bytes[p];
  }
  return totals;
}

}  // namespace gpt::comm
