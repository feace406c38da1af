// The layer ops of the equivalence table: the op-case table (kernels/cases) on CudaOps at the table's shapes,
// each case in fp32, fp16 and bf16 against the CPU's fp64 reference from the same starting values. The half
// rows go through the seam's mixed-precision contract (kernels/ops.h): activations and weights in the half
// dtype, LayerNorm's statistics, parameter gradients and losses fp32 (the cases' Arg::fp32).
#include <string>

#include "kernels/cases/op_cases.h"
#include "kernels/cases/run_case.h"
#include "tests/gpu_check/checks.h"

namespace gpt::gpu_check {

void check_cases(Table& table, Backends& backends, const Shapes& s, const std::string& family) {
  const cases::Sizes sizes{s.B, s.T, s.C, s.NH, s.V, s.offset};
  for (const cases::OpCase& c : cases::op_cases(sizes)) {
    if (c.family != family) continue;
    for (const cases::Variant& v : cases::kFloatVariants) {
      if (!s.dtype.empty() && s.dtype != v.label) continue;
      for (const cases::Result& r : cases::compare_to_reference(backends.gpu, c, v)) {
        Row row{r.op,
                r.dtype,
                r.shape,
                r.message.empty() ? scientific(r.error) : r.message,
                "<= " + scientific(r.tolerance),
                r.verdict == cases::Verdict::kPass};
        row.supported = r.verdict != cases::Verdict::kUnsupported;
        table.add(row);
      }
    }
  }
}

}  // namespace gpt::gpu_check
