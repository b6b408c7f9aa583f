"""The one way the repository rules find a system library: ask the compiler, which knows the multiarch
library folders (/usr/lib/x86_64-linux-gnu, ...)."""

def compiler_libdir(rctx, name):
    """Returns the folder holding library file `name` (e.g. "libtorch.so") on gcc's path, or None."""
    result = rctx.execute(["gcc", "-print-file-name=" + name])
    path = result.stdout.strip()
    if result.return_code == 0 and path.startswith("/") and rctx.path(path).exists:
        return str(rctx.path(path).dirname)
    return None
