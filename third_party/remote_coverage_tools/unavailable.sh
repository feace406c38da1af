#!/bin/sh
echo "coverage tools are not available offline; 'bazel coverage' is not supported in this repository" >&2
exit 1
