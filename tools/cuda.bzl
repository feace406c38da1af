"""cuda_library: compiles .cu files with the toolkit's nvcc and wraps the objects in a cc_library.

No CUDA rule set can be fetched offline, so this is a small rule of our own. nvcc runs as a plain action:
the rule gathers the headers (and include directories) of its deps from their CcInfo, so a .cu file includes
repository headers by their workspace path ("tensor/half.h", "kernels/cuda/linear.h"), exactly as g++ code
does. Every target it makes builds only under --config=cuda: a plain `bazel build //...` skips them.

    load("//tools:cuda.bzl", "cuda_library")
    cuda_library(
        name = "linear",
        srcs = ["linear.cu", "runtime.cc"],   # .cu -> nvcc, anything else -> the cc_library
        hdrs = ["linear.h"],
        deps = ["//tensor:half", "@cuda//:cublas"],
    )
"""

NVCC = "/usr/local/cuda/bin/nvcc"

# Hopper (H100/H200) and Ampere (A100) machine code, plus Hopper PTX so newer GPUs can JIT-compile it.
CUDA_ARCH_FLAGS = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=[sm_90,compute_90]",
]

NVCC_FLAGS = [
    "-std=c++20",
    "-O3",
    "-lineinfo",  # source lines in profiles (Nsight); costs no speed
    # Intermediate files next to the object, not in /tmp: inside Bazel's sandbox every nvcc runs as pid 2,
    # so parallel compiles would collide on /tmp/tmpxft_00000002_* names.
    "--objdir-as-tempdir",
    "--extended-lambda",  # __device__ lambdas in element-wise kernels (elementwise.cu)
    "-Xcompiler",
    "-fPIC",
]

# Targets list this unless --config=cuda (//tools:cuda_enabled), which no platform satisfies.
CUDA_ONLY = select({
    "//tools:cuda_enabled": [],
    "//conditions:default": ["//tools:special_build_only"],
})

def _is_header(path):
    return path.endswith(".h") or path.endswith(".cuh") or path.endswith(".hpp") or path.endswith(".inl")

def _cuda_objects_impl(ctx):
    contexts = [dep[CcInfo].compilation_context for dep in ctx.attr.deps if CcInfo in dep]
    headers = depset(ctx.files.hdrs, transitive = [c.headers for c in contexts])
    # The workspace root and the output root first, so repository and generated headers resolve by their
    # workspace paths; then whatever include directories the deps declare, each once.
    include_dirs = [".", ctx.bin_dir.path]
    for c in contexts:
        for d in c.includes.to_list() + c.quote_includes.to_list() + c.system_includes.to_list():
            if d not in include_dirs:
                include_dirs.append(d)

    objects, ptxas_logs = [], []
    for src in ctx.files.srcs:
        # One object per source, under a folder named after the target; .pic.o tells cc_library it is PIC.
        stem = src.short_path[:-len(src.extension) - 1]
        if ctx.label.package and stem.startswith(ctx.label.package + "/"):
            stem = stem[len(ctx.label.package) + 1:]
        obj = ctx.actions.declare_file("_nvcc/%s/%s.pic.o" % (ctx.label.name, stem))
        log = ctx.actions.declare_file("_nvcc/%s/%s.ptxas.log" % (ctx.label.name, stem))
        args = ctx.actions.args()
        args.add_all(NVCC_FLAGS)
        args.add_all(CUDA_ARCH_FLAGS)
        args.add_all(ctx.attr.copts)
        args.add("-Xptxas=-v")  # each function's registers and spills, per architecture, into the log
        args.add_all(include_dirs, format_each = "-I%s")
        args.add("-c", src)
        args.add("-o", obj)
        ctx.actions.run_shell(
            # $1 is nvcc, $2 the log. The log keeps nvcc's whole output; the terminal gets it without
            # ptxas's per-function report lines (the whole log when nvcc fails).
            command = 'nvcc=$1 log=$2; shift 2; "$nvcc" "$@" 2>"$log" || { cat "$log" >&2; exit 1; }; ' +
                      'grep -Ev "^ptxas info|^ +[0-9]+ bytes stack frame" "$log" >&2 || true',
            arguments = [NVCC, log.path, args],
            inputs = depset([src], transitive = [headers]),
            outputs = [obj, log],
            mnemonic = "NvccCompile",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,  # PATH, for nvcc to find the host compiler
        )
        objects.append(obj)
        ptxas_logs.append(log)
    # ptxas_logs: what tools/ptxas_spills.sh reads (a filegroup with output_group = "ptxas_logs").
    return [DefaultInfo(files = depset(objects)), OutputGroupInfo(ptxas_logs = depset(ptxas_logs))]

_cuda_objects = rule(
    implementation = _cuda_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
        "copts": attr.string_list(),
    },
)

def cuda_library(name, srcs = [], hdrs = [], deps = [], copts = [], linkopts = [], **kwargs):
    """A cc_library whose .cu sources are compiled by nvcc (CUDA builds only).

    Args:
      name: the cc_library's name.
      srcs: .cu files (nvcc), .cc files (the host compiler) and private headers (.cuh ones are device
        headers, for nvcc only).
      hdrs: public headers, seen by both compilers.
      deps: cc_library deps. Their headers reach nvcc too, except the @cuda repository's: nvcc brings the
        toolkit's own include directory, and a second copy of those headers under external/ would only
        invite confusion.
      copts: extra nvcc flags.
      linkopts: passed to the cc_library.
      **kwargs: passed to the cc_library (visibility, testonly, ...).
    """
    cu_srcs = [s for s in srcs if s.endswith(".cu")]
    private_hdrs = [s for s in srcs if _is_header(s)]
    host_srcs = [s for s in srcs if not s.endswith(".cu") and not s.endswith(".cuh")]  # .cuh: nvcc only
    visibility = kwargs.pop("visibility", None)
    testonly = kwargs.get("testonly", False)

    _cuda_objects(
        name = name + "_nvcc",
        srcs = cu_srcs,
        hdrs = hdrs + private_hdrs,
        deps = [d for d in deps if not d.startswith("@cuda//")],
        copts = copts,
        target_compatible_with = CUDA_ONLY,
        testonly = testonly,
        visibility = ["//visibility:private"],
    )
    native.cc_library(
        name = name,
        srcs = host_srcs + [":" + name + "_nvcc"],
        hdrs = hdrs,
        deps = deps + ["@cuda//:cudart"],
        linkopts = linkopts,
        target_compatible_with = CUDA_ONLY,
        visibility = visibility,
        **kwargs
    )
