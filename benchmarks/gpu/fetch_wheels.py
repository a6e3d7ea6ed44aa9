"""Download what the GPU check needs and the GPU machine lacks, for CPython 3.12 manylinux x86_64.

    python3 benchmarks/gpu/fetch_wheels.py [--dest .gpu-wheels] [--flashinfer VERSION | --no-flashinfer]

The GPU machine (see docs/GPU.md) has Python 3.12 with torch 2.11+cu130, numpy, pandas, pyarrow,
matplotlib, aiohttp, msgpack, tokenizers, safetensors, PyYAML, tqdm, mypy-extensions and nvcc,
and no network. What pdsim/pdreal import beyond that travels as wheels in `dest` (git-ignored),
and the working tree plus `dest` must stay under the device tool's 64 MiB:

- pure-Python and small wheels: simpy, hydra-core, omegaconf, antlr4-python3-runtime (built here
  from its sdist: PyPI has no wheel of 4.9.3), librt (mypyc's runtime: the prefix cache's
  arrays), pyzmq;
- mooncake-transfer-engine-cuda13, *trimmed*: only `mooncake.engine` (the TransferEngine pdreal
  uses) and the shared libraries it loads; the store, EP, process-group and CLI parts (two thirds
  of the wheel) are dropped and RECORD rewritten to match;
- `dest/syslibs.tar.xz`: the system libraries mooncake's engine links (libibverbs, libmlx5,
  libnuma, libcurl and their closure) copied from this machine (Debian 12); the check puts on
  LD_LIBRARY_PATH only those the GPU machine lacks;
- flashinfer-python (optional, without its bundled CUTLASS) with apache-tvm-ffi, when the
  total with the tracked files still fits; otherwise the check reports flashinfer as not installed.

Prints each file's size and the total with the working tree; exits 1 when over the limit.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIMIT_BYTES = 64 * 1024 * 1024
SYSLIBS = "syslibs.tar.xz"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_26_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
# pdsim's core dependencies (pyproject.toml) that the GPU image has at a version pyproject accepts;
# every other one travels in CORE (tests/benchmarks/test_gpu_wheels.py holds the two together).
# Its mypy-extensions is older than the 1.2.0 librt needs, so that one travels. packaging: listed in
# the H200 image (.library/device/KINDS.md, read 2026-11-17), and matplotlib requires it anyway.
GPU_IMAGE_HAS = ("numpy", "pandas", "pyarrow", "matplotlib", "tqdm", "packaging")
CORE = ("simpy==4.1.2", "hydra-core==1.3.8", "omegaconf==2.3.1", "librt==0.17.0", "pyzmq==27.3.0",
        "mypy-extensions==1.2.0")
SDIST_ONLY = ("antlr4-python3-runtime==4.9.3",)
MOONCAKE = "mooncake-transfer-engine-cuda13==0.3.14"
FLASHINFER_DEPS = ("apache-tvm-ffi==0.1.15.post2",)
SYSTEM_LIBS = ("libibverbs.so.1", "libmlx5.so.1", "libnuma.so.1", "libcurl.so.4")
GLIBC = ("linux-vdso", "libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "libresolv.so",
         "ld-linux", "libstdc++.so", "libgcc_s.so")


def pip_download(requirements: tuple[str, ...], dest: Path) -> None:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(dest), *requirements]
    subprocess.run(cmd, check=True)


def pip_wheel(requirements: tuple[str, ...], dest: Path) -> None:
    """Pure-Python wheels built here from sdists (any Python builds the same py3-none-any wheel)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(dest),
                    *requirements], check=True)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def trim_wheel(path: Path, keep: Callable[[str], bool]) -> tuple[int, int]:
    """Rewrite the wheel at `path` with only the members `keep` accepts (dist-info always kept,
    RECORD regenerated); returns (members before, members after)."""
    with zipfile.ZipFile(path) as src:
        members = [m for m in src.infolist() if not m.is_dir()]
        record = next(m.filename for m in members if m.filename.endswith(".dist-info/RECORD"))
        kept = [m for m in members if m.filename != record
                and (".dist-info/" in m.filename or keep(m.filename))]
        tmp = path.with_suffix(".trim")
        lines = []
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as out:
            for member in kept:
                data = src.read(member)
                out.writestr(member, data)
                lines.append(_record_line(member.filename, data))
            out.writestr(record, "\n".join([*lines, f"{record},,"]) + "\n")
    tmp.replace(path)
    return len(members), len(kept) + 1


def needed(path: Path) -> list[str]:
    """The NEEDED sonames of a shared library (readelf -d)."""
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def mooncake_keep(wheel: Path) -> Callable[[str], bool]:
    """Members of the mooncake wheel that `mooncake.engine` needs: the package's Python glue, engine.so
    and the closure of its NEEDED libraries inside the wheel."""
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
        libs = {Path(n).name: n for n in zf.namelist() if ".so" in Path(n).name}
        wanted, todo = set(), ["engine.so"]
        while todo:
            name = todo.pop()
            if name in wanted or name not in libs:
                continue
            wanted.add(name)
            todo += needed(Path(zf.extract(libs[name], tmp)))
    files = {libs[n] for n in wanted} | {"mooncake/__init__.py", "mooncake/engine.pyi", "mooncake/py.typed"}
    return files.__contains__


def flashinfer_keep(name: str) -> bool:
    """flashinfer without its bundled CUTLASS tree (FA3 and GEMM kernels; the paged FA2 attention
    pdreal uses does not include it). Its bundled CCCL stays: the FA2 headers need a newer CCCL
    (cuda::fast_mod_div) than CUDA 13.0's."""
    return not name.startswith("flashinfer/data/cutlass/")


def pack_system_libs(tarball: Path) -> None:
    """SYSTEM_LIBS and their non-glibc closure, from this machine (ldd), into an xz tarball (a
    third of their size)."""
    with tempfile.TemporaryDirectory() as tmp:
        libs = copy_system_libs(Path(tmp))
        with tarfile.open(tarball, "w:xz", preset=9) as tar:
            for lib in libs:
                tar.add(lib, arcname=lib.name)


def copy_system_libs(dest: Path) -> list[Path]:
    """SYSTEM_LIBS and their non-glibc closure, from this machine (ldd), into dest."""
    copied: dict[str, Path] = {}
    for lib in SYSTEM_LIBS:
        found = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=True).stdout
        path = next((line.split("=>")[1].strip() for line in found.splitlines()
                     if line.strip().startswith(lib + " ") and "x86-64" in line), "")
        if not path:
            raise SystemExit(f"fetch_wheels: system library {lib} not found here (apt-get install -y "
                             "libibverbs1 ibverbs-providers libnuma1 libcurl4)")
        ldd = subprocess.run(["ldd", path], capture_output=True, text=True, check=True).stdout
        deps = [line.split("=>")[1].split()[0] for line in ldd.splitlines() if "=>" in line and "/" in line]
        for dep in [path, *deps]:
            soname = Path(dep).name
            if not soname.startswith(GLIBC) and soname not in copied:
                copied[soname] = dest / soname
                shutil.copy2(Path(dep).resolve(), dest / soname)
    return sorted(copied.values())


def tree_bytes(untracked: bool = True) -> int:
    """Bytes of what the device tool sends: tracked files, plus (untracked) files git does not ignore."""
    return sum(size for _, size in tree_files(untracked))


def tree_files(untracked: bool) -> list[tuple[str, int]]:
    flags = ["--cached", "--others", "--exclude-standard"] if untracked else ["--cached"]
    out = subprocess.run(["git", "ls-files", "-z", *flags], cwd=REPO, capture_output=True, check=True).stdout
    return [(n, (REPO / n).stat().st_size) for n in out.decode().split("\0") if n and (REPO / n).is_file()]


def big_untracked(min_bytes: int = 1 << 20) -> dict[str, int]:
    """Top-level folders of untracked, not ignored files holding over min_bytes (they travel too)."""
    tracked = {n for n, _ in tree_files(False)}
    sizes: dict[str, int] = {}
    for name, size in tree_files(True):
        if name not in tracked:
            top = "/".join(name.split("/")[:2])
            sizes[top] = sizes.get(top, 0) + size
    return {k: v for k, v in sorted(sizes.items()) if v >= min_bytes}


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def fetch(dest: Path, flashinfer: str) -> int:
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    pip_download(CORE, dest)
    pip_wheel(SDIST_ONLY, dest)
    pip_download((MOONCAKE,), dest)
    wheel = next(dest.glob("mooncake_transfer_engine_cuda13-*.whl"))
    before, after = trim_wheel(wheel, mooncake_keep(wheel))
    print(f"  mooncake trimmed to mooncake.engine: {before} -> {after} members")
    pack_system_libs(dest / SYSLIBS)
    base = tree_bytes(untracked=False) + folder_bytes(dest)  # a stray untracked folder is reported, not fitted
    if flashinfer:
        fi_dir = dest / "flashinfer"
        fi_dir.mkdir()
        pip_download((f"flashinfer-python=={flashinfer}", *FLASHINFER_DEPS), fi_dir)
        trim_wheel(next(fi_dir.glob("flashinfer_python-*.whl")), flashinfer_keep)
        if base + folder_bytes(fi_dir) > LIMIT_BYTES:
            print(f"  flashinfer {flashinfer}: {folder_bytes(fi_dir) / 2**20:.1f} MiB does not fit; left out")
            shutil.rmtree(fi_dir)
    return report(dest)


def report(dest: Path) -> int:
    for path in sorted(p for p in dest.rglob("*") if p.is_file()):
        print(f"  {path.stat().st_size / 2**20:8.2f} MiB  {path.relative_to(dest)}")
    tree, wheels = tree_bytes(), folder_bytes(dest)
    total = tree + wheels
    print(f"working tree {tree / 2**20:.2f} MiB + {dest.name} {wheels / 2**20:.2f} MiB = {total / 2**20:.2f} MiB "
          f"(limit {LIMIT_BYTES / 2**20:.0f} MiB)")
    if total > LIMIT_BYTES:
        stray = ", ".join(f"{k} ({v / 2**20:.1f} MiB)" for k, v in big_untracked().items())
        print(f"fetch_wheels: over the device tool's limit; untracked, not ignored: {stray or 'none'}; "
              "ignore or remove those, or leave flashinfer out (--no-flashinfer)", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="The device tool carries the folder with carry=[DEST]; docs/GPU.md.")
    p.add_argument("--dest", type=Path, default=REPO / ".gpu-wheels",
                   help="output folder, emptied first (default: .gpu-wheels in the repo root, git-ignored)")
    p.add_argument("--flashinfer", default="0.6.18.post1", metavar="VERSION",
                   help="flashinfer-python version to try (default %(default)s; left out if it does not fit)")
    p.add_argument("--no-flashinfer", action="store_true", help="leave flashinfer out")
    p.add_argument("--report", action="store_true", help="only print the sizes of an existing DEST")
    args = p.parse_args(argv)
    if args.report:
        return report(args.dest)
    return fetch(args.dest, "" if args.no_flashinfer else args.flashinfer)


if __name__ == "__main__":
    sys.exit(main())
