"""gpt_fuzzer: one libFuzzer target, its committed seed corpus and the test that runs it.

Under --config=fuzz (clang, --define=fuzz=true) the binary links libFuzzer and the test runs it a fixed
number of iterations from a fixed seed over the corpus; in every other build (gcc, --config=asan) the binary
links :replay_main (replay_main.cc, compiled once) and the test replays the corpus, so every test run
exercises the committed inputs.
"""

def gpt_fuzzer(name, srcs, deps, data = [], runs = 20000):
    native.cc_binary(
        name = name,
        srcs = srcs,
        linkopts = select({
            "//fuzz:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
        deps = deps + [":fuzz_support"] + select({
            "//fuzz:fuzzing": [],
            "//conditions:default": [":replay_main"],
        }),
        data = data,
        testonly = True,
    )
    native.sh_test(
        name = name + "_test",
        srcs = ["fuzz_test.sh"],
        args = ["$(location :%s)" % name, "fuzz/corpus/" + name] + select({
            "//fuzz:fuzzing": ["-runs=%d" % runs],
            "//conditions:default": [],
        }),
        data = [":" + name] + native.glob(["corpus/%s/*" % name]) + data,
    )
