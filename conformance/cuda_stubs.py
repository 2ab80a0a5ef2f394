#!/usr/bin/env python3
"""Build tiny stand-in CUDA shared libraries so PyPI's (CUDA-only) torch
imports on a machine without the ~3 GB of nvidia-* wheels.

Why: vLLM 0.33.0 pins torch==2.14.0, and PyPI only ships the CUDA build for
Linux x86_64 (download.pytorch.org, which has CPU wheels, is unreachable).
libtorch_cpu/libtorch_cuda/libtorch_python list libcudart, libcublas, libcudnn,
... as DT_NEEDED, so `import torch` fails without them. The conformance
replayer never runs a CUDA kernel: it only needs torch to import (vLLM's
import chain and `torch.float32` for the KV cache specs). So we give the
dynamic loader what it wants and nothing more:

* one stub library per DT_NEEDED CUDA soname (libcudart.so.13, ...), written
  into torch/lib/ -- every torch library has `$ORIGIN` in its RPATH, so the
  loader finds them there;
* each stub defines every symbol that torch's libraries import from it,
  under the same symbol version (vLLM/torch reference e.g.
  `cudaMalloc@libcudart.so.13`), so resolution (even RTLD_NOW) succeeds;
* every stub function returns 100 (cudaErrorNoDevice), so if torch ever
  asks, it learns there is no GPU -- which is the truth here; *ErrorString /
  *ErrorName functions return a static string instead.

Requires gcc and readelf (binutils). Usage:
    python cuda_stubs.py SITE_PACKAGES_DIR
Exits non-zero if it cannot build the stubs (the caller then falls back to
installing the real nvidia-* wheels).
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

SYSTEM_LIBS = re.compile(
    r"^(libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libstdc\+\+\.so|"
    r"libgcc_s\.so|ld-linux|libgomp|libutil\.so)"
)
TORCH_OWN = re.compile(r"^(libtorch|libc10|libshm|libcaffe2|libgomp)")


def dyn(path):
    """Return (needed sonames, defined names, undefined [(name, file, ver, type,
    bind)], where file is the soname a versioned reference is bound to)."""
    needed = []
    out = subprocess.run(["readelf", "-dW", path], capture_output=True, text=True,
                         check=True).stdout
    for m in re.finditer(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out):
        needed.append(m.group(1))
    # version name -> file (from .gnu.version_r: "File: X" then "Name: V" lines)
    out = subprocess.run(["readelf", "-VW", path], capture_output=True, text=True,
                         check=True).stdout
    ver_file, cur = {}, None
    for line in out.splitlines():
        m = re.search(r"File: (\S+)\s+Cnt:", line)
        if m:
            cur = m.group(1)
            continue
        m = re.search(r"Name: (\S+)\s+Flags:", line)
        if m and cur:
            ver_file[m.group(1)] = cur
    out = subprocess.run(["readelf", "--dyn-syms", "-W", path], capture_output=True,
                         text=True, check=True).stdout
    defined, undefined = set(), []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 8 or not parts[0].endswith(":"):
            continue
        _num, _val, _size, typ, bind, _vis, ndx = parts[:7]
        name = parts[7]
        ver = None
        if "@" in name:
            name, _, ver = name.partition("@")
            ver = ver.lstrip("@")
        if ndx == "UND":
            if name:
                undefined.append((name, ver_file.get(ver) if ver else None, ver,
                                  typ, bind))
        else:
            defined.add(name)
    return needed, defined, undefined


def main():
    site = sys.argv[1]
    libdir = os.path.join(site, "torch", "lib")
    elfs = sorted(glob.glob(os.path.join(libdir, "*.so*")))
    elfs += sorted(glob.glob(os.path.join(site, "torch", "_C*.so")))
    needed_all, defined_all, undef_all = set(), set(), []
    for p in elfs:
        if os.path.islink(p):
            continue
        n, d, u = dyn(p)
        needed_all.update(n)
        defined_all |= d
        undef_all.extend(u)
    present = {os.path.basename(p) for p in elfs}
    targets = sorted(
        s for s in needed_all
        if not SYSTEM_LIBS.match(s) and not TORCH_OWN.match(s) and s not in present
    )
    if not targets:
        print("cuda_stubs: nothing to stub")
        return 0
    per_lib = {t: {} for t in targets}  # soname -> {version: {name: type}}
    unversioned = {}
    for name, file, ver, typ, bind in undef_all:
        if name in defined_all:
            continue
        if file in per_lib:
            per_lib[file].setdefault(ver, {})[name] = typ
        elif ver is None and bind != "WEAK":
            unversioned[name] = typ
    # Unversioned references to CUDA libraries (NCCL, cuSPARSELt, cuFile and
    # the driver API are not symbol-versioned) go to the stub of the library
    # that really provides them. Everything else unversioned (Python C-API,
    # libstdc++) is provided by the process and must NOT be stubbed.
    routes = [("nccl", "libnccl"), ("cusparseLt", "libcusparseLt"),
              ("cuFile", "libcufile"), ("curand", "libcurand"),
              ("nvshmem", "libnvshmem"), ("cudnn", "libcudnn"),
              ("cublasLt", "libcublasLt"), ("cublas", "libcublas"),
              ("cufft", "libcufft"), ("cusparse", "libcusparse"),
              ("cusolver", "libcusolver"), ("nvrtc", "libnvrtc"),
              ("cupti", "libcupti"), ("cuda", "libcudart")]
    extra_by_lib = {t: {} for t in targets}
    for name, typ in unversioned.items():
        lib = None
        for prefix, stem in routes:
            if name.startswith(prefix):
                lib = stem
                break
        if lib is None and re.match(r"^cu[A-Z]", name):
            lib = "libcuda."
        if lib is None:
            continue
        dest = next((t for t in targets if t.startswith(lib)), None)
        if dest is not None:
            extra_by_lib[dest][name] = typ
    tmp = tempfile.mkdtemp(prefix="cuda_stubs.")
    for soname in targets:
        versions = per_lib[soname]
        syms = {}
        for vsyms in versions.values():
            syms.update(vsyms)
        extra = {k: t for k, t in extra_by_lib[soname].items() if k not in syms}
        c = ['static const char stub_msg[] = "no CUDA (kvsim conformance stub)";']
        k = 0
        for name, typ in sorted(syms.items()) + sorted(extra.items()):
            k += 1
            if typ == "OBJECT":
                c.append(f'char s{k}[256] __asm__("{name}") = {{0}};')
            elif typ == "TLS":
                c.append(f'__thread char s{k}[256] __asm__("{name}");')
            elif "ErrorString" in name or "ErrorName" in name:
                c.append(f'const char *s{k}(void) __asm__("{name}");')
                c.append(f"const char *s{k}(void) {{ return stub_msg; }}")
            else:
                c.append(f'long s{k}(void) __asm__("{name}");')
                c.append(f"long s{k}(void) {{ return 100; }}")
        src = os.path.join(tmp, soname + ".c")
        with open(src, "w") as f:
            f.write("\n".join(c) + "\n")
        vs = os.path.join(tmp, soname + ".map")
        with open(vs, "w") as f:
            if not versions:
                f.write(f'"{soname}" {{ global: *; }};\n')
            for ver, vsyms in sorted(versions.items()):
                f.write(f'"{ver}" {{ global: ' + " ".join(
                    f'"{s}";' for s in sorted(vsyms)) + " };\n")
        out = os.path.join(libdir, soname)
        cmd = ["gcc", "-shared", "-fPIC", "-O0", "-o", out, src,
               f"-Wl,-soname,{soname}", f"-Wl,--version-script={vs}"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        print(f"cuda_stubs: {soname}: {len(syms)} versioned + {len(extra)} unversioned symbols")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
