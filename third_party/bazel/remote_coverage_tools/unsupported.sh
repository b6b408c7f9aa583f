#!/bin/sh
echo "bazel coverage is not supported offline: Bazel's coverage tools are not packaged in Debian." >&2
exit 1
