"""The trainer's shell tests: the train binary as users run it, with the tools a test names."""

def train_sh_test(name, size, tools = [], tags = []):
    """A test `<name>.sh` run as `<name>.sh TRAIN TOOL...`.

    Args:
      name: the test, and its script without ".sh".
      size: Bazel's test size.
      tools: labels of further programs the script gets, in this order, after the train binary.
      tags: Bazel tags (e.g. "no-sandbox" for tests that need the host's view).
    """
    native.sh_test(
        name = name,
        size = size,
        srcs = [name + ".sh"],
        args = ["$(location :train)"] + ["$(location %s)" % t for t in tools],
        data = [":train"] + tools,
        tags = tags,
        deps = ["//tools/testing:shell_test_lib"],
    )
