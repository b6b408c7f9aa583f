#!/usr/bin/env python3
"""Generates cmake/targets.cmake from the project's Bazel BUILD files.

Bazel stays the source of truth: every cc_library, cc_binary, cc_test, sh_test, sh_binary and
filegroup of the project becomes one call of the functions in cmake/dtrain_rules.cmake, in an order
where each target follows its dependencies. Labels of //third_party map to the targets that
cmake/dependencies.cmake makes from find_package.

  tools/cmake/gen_cmake.py           rewrite cmake/targets.cmake
  tools/cmake/gen_cmake.py --check   exit 1 (with a diff) when cmake/targets.cmake is stale

BUILD files are Starlark, a dialect of Python: they are run with stand-ins for the rules, which
record each target's attributes. Only what the project's BUILD files use is understood; anything
else (a select(), a rule this script does not know) stops the script with the file and the rule.
Python 3 standard library only.
"""

import argparse
import difflib
import glob as globlib
import os
import shlex
import sys
import types

# Folders whose BUILD files are not project targets: offline stand-ins for Bazel's own repositories,
# and //third_party (its targets are the system libraries, mapped below).
SKIPPED_DIRS = ("third_party/bazel", "bazel-")
SYSTEM_PACKAGE = "third_party"

# //third_party:<name> -> the CMake target cmake/dependencies.cmake defines for it.
SYSTEM_TARGETS = {
    "torch": "dtrain_tp_torch",
    "torch_config": "dtrain_tp_torch_config",
    "cudart": "dtrain_tp_cudart",
    "nccl": "dtrain_tp_nccl",
    "cuda_config": "dtrain_tp_cuda_config",
    "gloo": "dtrain_tp_gloo",
    "gloo_compat": "dtrain_tp_gloo",
    "absl": "dtrain_tp_absl",
    "gtest": "dtrain_tp_gtest",
    "gtest_main": "dtrain_tp_gtest_main",
    "gmock": "dtrain_tp_gmock",
    "gmock_main": "dtrain_tp_gmock_main",
    "benchmark": "dtrain_tp_benchmark",
    "benchmark_main": "dtrain_tp_benchmark_main",
    "prometheus_core": "dtrain_tp_prometheus_core",
    "prometheus_pull": "dtrain_tp_prometheus_pull",
    "prometheus_push": "dtrain_tp_prometheus_push",
    "json": "dtrain_tp_json",
    "zlib": "dtrain_tp_zlib",
    "jpeg": "dtrain_tp_jpeg",
    "png": "dtrain_tp_png",
}

# A cc_library tagged "cmake_stand_in_for=:X" is what the CMake build links in place of :X (same
# package) when a system library :X needs is missing (dtrain_cc_library's STAND_IN).
STAND_IN_TAG = "cmake_stand_in_for="

# Bazel's default timeout for each test size, in seconds.
TIMEOUTS = {"small": 60, "medium": 300, "large": 900, "enormous": 3600}

KNOWN_ATTRS = {
    "cc_library": {"name", "srcs", "hdrs", "deps", "visibility", "linkopts", "testonly",
                   "linkstatic", "alwayslink", "tags"},
    "cc_binary": {"name", "srcs", "deps", "visibility", "testonly", "data", "linkopts"},
    "cc_test": {"name", "srcs", "deps", "size", "data", "args", "tags", "timeout"},
    "sh_test": {"name", "srcs", "deps", "size", "data", "args", "tags", "timeout"},
    "sh_binary": {"name", "srcs", "data", "deps", "visibility"},
    "sh_library": {"name", "srcs", "data", "deps", "visibility"},
    "filegroup": {"name", "srcs", "visibility"},
    "alias": {"name", "actual", "visibility"},
}


class BuildError(Exception):
    pass


class Target:
    def __init__(self, kind, package, attrs):
        self.kind = kind
        self.package = package
        self.attrs = attrs
        self.name = attrs["name"]

    @property
    def label(self):
        return "//%s:%s" % (self.package, self.name)


def read_packages(root):
    """Runs every project BUILD file; returns {package: {name: Target}} and {package: exported files}."""
    packages = {}
    exported = {}
    build_files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")
                             and not os.path.join(rel, d).startswith(SKIPPED_DIRS))
        if "BUILD" in filenames and rel != SYSTEM_PACKAGE:
            build_files.append(rel)
    for package in sorted(build_files):
        targets = {}
        files = set()
        path = os.path.join(root, package, "BUILD")

        def rule(kind, _package=package, _targets=targets, _path=path):
            def record(**attrs):
                unknown = set(attrs) - KNOWN_ATTRS[kind]
                if unknown:
                    raise BuildError("%s: %s(name = %r) has attributes this generator does not "
                                     "know: %s" % (_path, kind, attrs.get("name"),
                                                   ", ".join(sorted(unknown))))
                _targets[attrs["name"]] = Target(kind, _package, attrs)
            return record

        def glob(include, exclude=(), _package=package):
            base = os.path.join(root, _package)
            found = set()
            for pattern in include:
                for f in globlib.glob(os.path.join(base, pattern), recursive=True):
                    if os.path.isfile(f):
                        found.add(os.path.relpath(f, base))
            for pattern in exclude:
                for f in globlib.glob(os.path.join(base, pattern), recursive=True):
                    found.discard(os.path.relpath(f, base))
            return sorted(found)

        def unsupported(what, _path=path):
            def fail(*args, **kwargs):
                raise BuildError("%s: %s() is not supported by tools/cmake/gen_cmake.py" %
                                 (_path, what))
            return fail

        rules = {kind: rule(kind) for kind in KNOWN_ATTRS}

        def load(label, *symbols, _path=path, _rules=rules):
            """A project .bzl file of macros over the rules above (native.<rule>)."""
            if not label.startswith("//") or ":" not in label:
                raise BuildError("%s: load(%r): only //package:file.bzl labels of this "
                                 "repository are supported" % (_path, label))
            bzl_package, bzl_file = label[2:].split(":", 1)
            bzl_path = os.path.join(root, bzl_package, bzl_file)
            module = {"native": types.SimpleNamespace(**_rules)}
            with open(bzl_path) as f:
                exec(compile(f.read(), bzl_path, "exec"), module)  # This repository's .bzl.
            for symbol in symbols:
                if symbol not in module:
                    raise BuildError("%s: load(%r): no %s there" % (_path, label, symbol))
                env[symbol] = module[symbol]

        env = dict(rules)
        env["glob"] = glob
        env["package"] = lambda **kwargs: None
        env["exports_files"] = lambda srcs, **kwargs: files.update(srcs)
        env["select"] = unsupported("select")
        env["load"] = load
        env["genrule"] = unsupported("genrule")
        with open(path) as f:
            code = compile(f.read(), path, "exec")
        exec(code, env)  # BUILD files of this repository only.
        packages[package] = targets
        exported[package] = files
    return packages, exported


class Resolver:
    """Turns Bazel labels into targets, files or system libraries."""

    def __init__(self, root, packages):
        self.root = root
        self.packages = packages

    def split(self, label, package):
        if label.startswith("//"):
            path, _, name = label[2:].partition(":")
            return path, name or os.path.basename(path)
        if label.startswith(":"):
            return package, label[1:]
        return package, label

    def resolve(self, label, package):
        """Returns ("target", Target), ("system", cmake name) or ("file", workspace path)."""
        path, name = self.split(label, package)
        if path == SYSTEM_PACKAGE:
            if name not in SYSTEM_TARGETS:
                raise BuildError("//third_party:%s has no CMake counterpart in "
                                 "tools/cmake/gen_cmake.py" % name)
            return "system", SYSTEM_TARGETS[name]
        target = self.packages.get(path, {}).get(name)
        if target is not None:
            if target.kind == "alias":
                return self.resolve(target.attrs["actual"], path)
            return "target", target
        file_path = os.path.join(path, name) if path else name
        if not os.path.exists(os.path.join(self.root, file_path)):
            raise BuildError("%s (in //%s) is neither a target nor a file" % (label, package))
        return "file", file_path


def cmake_name(target):
    """dtrain_<package>_<name>, the name left out when it repeats the package's last folder."""
    parts = target.package.split("/") if target.package else []
    if not parts or parts[-1] != target.name:
        parts.append(target.name)
    return "dtrain_" + "_".join(parts)


def export_name(target):
    """The name users see after dtrain::; //dist/ddp is dtrain::ddp, //dist/store:tcp_store
    dtrain::store_tcp_store."""
    return cmake_name(target)[len("dtrain_"):].replace("dist_", "", 1) \
        if target.package.startswith("dist") else cmake_name(target)[len("dtrain_"):]


def executable_path(target):
    """Where Bazel puts a rule's output, relative to the runfiles root: also where CMake puts it."""
    return os.path.join(target.package, target.name) if target.package else target.name


class Generator:
    def __init__(self, root):
        self.root = root
        self.packages, self.exported = read_packages(root)
        self.resolver = Resolver(root, self.packages)
        self.lines = []
        self.emitted = set()
        self.visiting = set()

    def files(self, target, attr):
        out = []
        for label in target.attrs.get(attr, []):
            kind, value = self.resolver.resolve(label, target.package)
            if kind != "file":
                raise BuildError("%s: %s lists %s, which is not a file" %
                                 (target.label, attr, label))
            out.append(value)
        return out

    def deps(self, target, attr):
        """CMake names of the rule's dependencies in attr, emitting project targets first."""
        out = []
        for label in target.attrs.get(attr, []):
            kind, value = self.resolver.resolve(label, target.package)
            if kind == "system":
                out.append(value)
            elif kind == "target":
                self.emit(value)
                out.append(cmake_name(value))
            else:
                raise BuildError("%s: %s lists %s, which is a file" % (target.label, attr, label))
        return out

    def runfiles(self, target, attrs):
        """Files and targets in attrs: ([workspace paths of files], [CMake targets])."""
        files, targets = [], []
        for attr in attrs:
            for label in target.attrs.get(attr, []):
                kind, value = self.resolver.resolve(label, target.package)
                if kind == "file":
                    files.append(value)
                elif kind == "target":
                    self.emit(value)
                    if value.kind not in ("filegroup", "sh_library"):
                        targets.append(cmake_name(value))
                    files.extend(self.target_files(value))
                else:
                    targets.append(value)
        return files, targets

    def target_files(self, target):
        """The source files a data dependency brings into the runfiles tree."""
        if target.kind == "filegroup":
            return self.files(target, "srcs")
        if target.kind in ("sh_binary", "sh_library"):
            files, _ = self.runfiles(target, ("srcs", "data", "deps"))
            return files
        if target.kind == "cc_binary":
            files, _ = self.runfiles(target, ("data",))
            return files
        return []

    def expand(self, arg, target):
        """$(location X) and $(locations X) as Bazel expands them: paths from the runfiles root."""
        out = []
        rest = arg
        while "$(" in rest:
            before, _, tail = rest.partition("$(")
            inner, _, rest = tail.partition(")")
            func, _, label = inner.partition(" ")
            if func not in ("location", "locations", "rootpath", "rootpaths"):
                raise BuildError("%s: $(%s) is not supported" % (target.label, func))
            kind, value = self.resolver.resolve(label.strip(), target.package)
            if kind == "file":
                paths = [value]
            elif kind == "target" and value.kind == "filegroup":
                paths = self.files(value, "srcs")
            elif kind == "target":
                paths = [executable_path(value)]
            else:
                raise BuildError("%s: $(location %s) names a system library" %
                                 (target.label, label))
            out.append(before + " ".join(paths))
        return "".join(out) + rest

    def emit(self, target):
        if target.label in self.emitted:
            return
        if target.label in self.visiting:
            raise BuildError("dependency cycle through %s" % target.label)
        self.visiting.add(target.label)
        method = getattr(self, "emit_" + target.kind)
        body = method(target)
        self.visiting.discard(target.label)
        self.emitted.add(target.label)
        if body is not None:
            self.lines.append("# %s\n%s\n" % (target.label, body))

    @staticmethod
    def call(function, name, sections):
        out = ["%s(%s" % (function, name)]
        for key, values in sections:
            if values is True:
                out.append("  " + key)
            elif values:
                out.append("  %s %s" % (key, " ".join(quote(v) for v in values)))
        return "\n".join(out) + ")"

    def stand_in(self, t):
        """The CMake name of the library tagged to stand in for t, emitted first; or None."""
        found = None
        for other in self.packages[t.package].values():
            for tag in other.attrs.get("tags", []) if other.kind == "cc_library" else []:
                if not tag.startswith(STAND_IN_TAG):
                    continue
                kind, value = self.resolver.resolve(tag[len(STAND_IN_TAG):], other.package)
                if kind != "target" or value.kind != "cc_library" or value.package != t.package:
                    raise BuildError("%s: %s does not name a cc_library of its package" %
                                     (other.label, tag))
                if value is t:
                    if found is not None:
                        raise BuildError("%s has two stand-ins: %s and %s" %
                                         (t.label, found.label, other.label))
                    found = other
        if found is None:
            return None
        self.emit(found)
        return cmake_name(found)

    def emit_cc_library(self, t):
        deps = self.deps(t, "deps")
        stand_in = self.stand_in(t)
        return self.call("dtrain_cc_library", cmake_name(t), [
            ("EXPORT_NAME", [export_name(t)]),
            ("PACKAGE", [t.package]),
            ("SRCS", self.files(t, "srcs")),
            ("HDRS", self.files(t, "hdrs")),
            ("DEPS", deps),
            ("LINKOPTS", t.attrs.get("linkopts", [])),
            ("STAND_IN", [stand_in] if stand_in else []),
            ("STANDS_IN", any(tag.startswith(STAND_IN_TAG) for tag in t.attrs.get("tags", []))),
            ("ALWAYSLINK", bool(t.attrs.get("alwayslink"))),
            ("TESTONLY", bool(t.attrs.get("testonly"))),
        ])

    def emit_cc_binary(self, t):
        deps = self.deps(t, "deps")
        data_files, data_targets = self.runfiles(t, ("data",))
        return self.call("dtrain_cc_binary", cmake_name(t), [
            ("OUTPUT", [executable_path(t)]),
            ("SRCS", self.files(t, "srcs")),
            ("DEPS", deps),
            ("LINKOPTS", t.attrs.get("linkopts", [])),
            ("DATA", data_files),
            ("DATA_TARGETS", data_targets),
            ("TESTONLY", bool(t.attrs.get("testonly"))),
        ])

    def test_sections(self, t):
        data_files, data_targets = self.runfiles(t, ("data",))
        size = t.attrs.get("size", "medium")
        timeout = TIMEOUTS[t.attrs.get("timeout", size)]
        tags = t.attrs.get("tags", [])
        return data_files, data_targets, [
            ("TIMEOUT", [str(timeout)]),
            # Bazel tokenizes each expanded argument as a Bourne shell would: $(locations X)
            # becomes one argument per file.
            ("ARGS", [w for a in t.attrs.get("args", []) for w in shlex.split(self.expand(a, t))]),
            ("RUN_SERIAL", "exclusive" in tags),
        ]

    def emit_cc_test(self, t):
        deps = self.deps(t, "deps")
        data_files, data_targets, sections = self.test_sections(t)
        return self.call("dtrain_cc_test", cmake_name(t), [
            ("OUTPUT", [executable_path(t)]),
            ("SRCS", self.files(t, "srcs")),
            ("DEPS", deps),
            ("DATA", data_files),
            ("DATA_TARGETS", data_targets),
        ] + sections)

    def emit_sh_test(self, t):
        srcs = self.files(t, "srcs")
        if len(srcs) != 1:
            raise BuildError("%s: an sh_test has exactly one source" % t.label)
        lib_files, lib_targets = self.runfiles(t, ("deps",))
        data_files, data_targets, sections = self.test_sections(t)
        return self.call("dtrain_sh_test", cmake_name(t), [
            ("OUTPUT", [executable_path(t)]),
            ("SCRIPT", srcs),
            ("DATA", sorted(set(data_files + lib_files))),
            ("DATA_TARGETS", data_targets + lib_targets),
        ] + sections)

    def emit_sh_binary(self, t):
        srcs = self.files(t, "srcs")
        data_files, data_targets = self.runfiles(t, ("data", "deps"))
        return self.call("dtrain_sh_binary", cmake_name(t), [
            ("OUTPUT", [executable_path(t)]),
            ("SCRIPT", srcs),
            ("DATA", data_files),
            ("DATA_TARGETS", data_targets),
        ])

    # Files only: they reach CMake through the rules that use them.
    def emit_sh_library(self, t):
        self.runfiles(t, ("srcs", "data", "deps"))

    def emit_filegroup(self, t):
        self.files(t, "srcs")

    def emit_alias(self, t):
        kind, value = self.resolver.resolve(t.attrs["actual"], t.package)
        if kind == "target":
            self.emit(value)

    def generate(self):
        for package in sorted(self.packages):
            for name in sorted(self.packages[package]):
                self.emit(self.packages[package][name])
        header = ("# Generated by tools/cmake/gen_cmake.py from the BUILD files: do not edit.\n"
                  "# //tools/cmake:cmake_sync_test fails when this file and the BUILD files "
                  "differ;\n# run tools/cmake/gen_cmake.py after changing a BUILD file.\n\n")
        return header + "\n".join(self.lines)


def quote(value):
    if value and all(c.isalnum() or c in "_-./+=:,<>$" for c in value):
        return value
    return '"%s"' % value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 when cmake/targets.cmake is stale")
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), help="the workspace (default: this script's)")
    args = parser.parse_args()
    out_path = os.path.join(args.root, "cmake", "targets.cmake")
    try:
        text = Generator(args.root).generate()
    except BuildError as e:
        print("gen_cmake: %s" % e, file=sys.stderr)
        return 2
    if args.check:
        try:
            with open(out_path) as f:
                current = f.read()
        except FileNotFoundError:
            current = ""
        if current == text:
            print("cmake/targets.cmake matches the BUILD files")
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(True), text.splitlines(True),
            "cmake/targets.cmake (committed)", "cmake/targets.cmake (from the BUILD files)"))
        print("\ncmake/targets.cmake is stale: run tools/cmake/gen_cmake.py", file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
