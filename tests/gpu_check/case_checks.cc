// The layer ops of the equivalence table: the op-case table (kernels/cases) on CudaOps at the table's shapes,
// each case in fp32, fp16 and bf16 against the CPU's fp64 reference from the same starting values. The half
// rows go through the seam's mixed-precision contract (kernels/ops.h): activations and weights in the half
// dtype, LayerNorm's statistics, parameter gradients and losses fp32 (the cases' Arg::fp32). Attention also
// runs as "fp32-bf16": fp32 tensors with GEMM inputs rounded to bf16 (set_matmul_inputs, the fp32 layer
// loop's --bf16), where CudaOps runs its bf16 kernels on rounded copies; selected with the bf16 rows by
// --dtype, at bf16's tolerance. (cuBLAS rounds linear's inputs itself: train1's bf16 row covers it.)
#include <iterator>
#include <string>
#include <vector>

#include "kernels/cases/op_cases.h"
#include "kernels/cases/run_case.h"
#include "tests/gpu_check/checks.h"

namespace gpt::gpu_check {

void check_cases(Table& table, Backends& backends, const Shapes& s, const std::string& family) {
  const cases::Sizes sizes{s.B, s.T, s.C, s.NH, s.V, s.offset};
  for (const cases::OpCase& c : cases::op_cases(sizes)) {
    if (c.family != family) continue;
    std::vector<cases::Variant> variants(std::begin(cases::kFloatVariants), std::end(cases::kFloatVariants));
    if (family == "attention") variants.push_back(cases::kFp32Bf16Inputs);
    for (const cases::Variant& v : variants) {
      const std::string selected_as = v.matmul_inputs == DType::kBF16 ? "bf16" : v.label;
      if (!s.dtype.empty() && s.dtype != selected_as) continue;
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
