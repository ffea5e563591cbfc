"""Kernel headers for bcc on machines whose running kernel ships none.

bcc compiles every program against a kernel build tree: ``$BCC_KERNEL_SOURCE``,
else ``/lib/modules/$(uname -r)/build`` (or ``source``), else the tree
``/sys/kernel/kheaders.tar.xz`` unpacks to (CONFIG_IKHEADERS).  Cloud and
firecracker kernels often have none of these, but Debian's
``linux-headers-<ver>-common`` (the source headers) plus
``linux-headers-<ver>-<flavour>`` (the generated headers and ``.config``) are
installable: merged into one tree of symlinks (the flavour's files win) and
passed as ``BCC_KERNEL_SOURCE`` they compile tracepoint programs, whose
argument layouts bcc reads from tracefs rather than from the headers, so a
version mismatch with the running kernel does not matter for them.

The merged tree is built once per header version in a cache directory
(``/var/cache/fipstop`` as root, else ``$XDG_CACHE_HOME/fipstop`` or
``~/.cache/fipstop``), in a temp dir renamed into place so concurrent
callers never see half a tree.  Every failure comes back as one line that says
what is missing and how to get it.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = ["KernelHeaders", "find_kernel_headers", "cache_root", "merge_trees", "debian_pairs"]

#: uname machine -> Debian header flavours, most generic first
FLAVOURS: dict[str, tuple[str, ...]] = {
    "x86_64": ("amd64", "cloud-amd64", "rt-amd64"),
    "aarch64": ("arm64", "cloud-arm64", "rt-arm64"),
    "ppc64le": ("powerpc64le",),
    "s390x": ("s390x",),
}
#: uname machine -> kernel arch directory (arch/<dir>/include/generated)
KARCH: dict[str, str] = {"x86_64": "x86", "aarch64": "arm64", "ppc64le": "powerpc", "s390x": "s390"}
MARKER = ".fipstop-kheaders"


@dataclass(frozen=True, slots=True)
class KernelHeaders:
    """Where bcc's headers come from.

    ``env`` is the value to give ``BCC_KERNEL_SOURCE`` (None: bcc finds its
    headers itself, or there are none).  ``ok`` False means bcc cannot
    compile; ``reason`` says why in one line.  ``note`` says what was used.
    """

    ok: bool
    env: str | None
    reason: str = ""
    note: str = ""
    built: bool = False


def cache_root(*, uid: int | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """Root writes a machine-wide cache; anyone else their own."""
    env = os.environ if environ is None else environ
    uid = os.geteuid() if uid is None else uid
    if uid == 0:
        return Path("/var/cache/fipstop")
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path(env.get("HOME", tempfile.gettempdir())) / ".cache"
    return base / "fipstop"


def _version_key(ver: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"[.\-+~]", ver))


def debian_pairs(src_root: Path, machine: str) -> list[tuple[str, Path, Path]]:
    """(version, common dir, flavour dir) of every complete Debian header
    pair under ``src_root``, newest version first."""
    flavours = FLAVOURS.get(machine, ())
    pairs = []
    try:
        names = sorted(os.listdir(src_root))
    except OSError:
        return []
    for name in names:
        for fl in flavours:
            m = re.fullmatch(rf"linux-headers-(.+)-{re.escape(fl)}", name)
            if not m:
                continue
            ver = m.group(1)
            common = src_root / f"linux-headers-{ver}-common"
            flavour = src_root / name
            if common.is_dir() and flavour.is_dir():
                pairs.append((ver, common, flavour))
            break
    pairs.sort(key=lambda p: _version_key(p[0]), reverse=True)
    return pairs


def merge_trees(sources: list[Path], dest: Path) -> int:
    """Fill ``dest`` with symlinks to every file of ``sources``; later
    sources override earlier ones; directories merge (also through
    symlinked directories).  Returns the number of links made."""
    n = 0

    def merge(src: Path, dst: Path) -> None:
        nonlocal n
        dst.mkdir(exist_ok=True)
        with os.scandir(src) as it:
            entries = list(it)
        for e in entries:
            target = dst / e.name
            if e.is_dir(follow_symlinks=False):
                if target.is_symlink():
                    target.unlink()
                merge(Path(e.path), target)
                continue
            if e.is_symlink() and e.is_dir() and target.is_dir() and not target.is_symlink():
                merge(Path(os.path.realpath(e.path)), target)
                continue
            if target.is_symlink() or target.exists():
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink()
            # absolute link to the resolved file: relative links inside the
            # package trees (scripts -> ../../lib/linux-kbuild-*) keep working
            os.symlink(os.path.realpath(e.path), target)
            n += 1

    for s in sources:
        merge(s, dest)
    return n


def _tree_problem(tree: Path, machine: str) -> str | None:
    karch = KARCH.get(machine, "x86")
    for rel in ("include/linux/kconfig.h", "include/generated/autoconf.h",
                f"arch/{karch}/include/generated", f"arch/{karch}/include/asm"):
        if not (tree / rel).exists():
            return f"{tree}/{rel} is missing"
    return None


def _build(ver: str, common: Path, flavour: Path, root: Path, machine: str) -> KernelHeaders:
    dest = root / f"kheaders-{ver}-{flavour.name.rsplit('-', 1)[-1]}"
    stamp = f"{common}\n{flavour}\n"
    marker = dest / MARKER
    if marker.is_file():
        try:
            if marker.read_text() == stamp and _tree_problem(dest, machine) is None:
                return KernelHeaders(True, str(dest), note=f"merged Debian headers {ver} (cached in {dest})")
        except OSError:
            pass
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=root))
    except OSError as exc:
        return KernelHeaders(False, None, reason=f"cannot create the header cache {root}: {exc.strerror or exc}")
    try:
        merge_trees([common, flavour], tmp)
        problem = _tree_problem(tmp, machine)
        if problem:
            return KernelHeaders(False, None, reason=f"merged headers {common.name} + {flavour.name} are "
                                 f"incomplete: {problem.replace(str(tmp), '...')}")
        (tmp / MARKER).write_text(stamp)
        tmp.chmod(0o755)
        try:
            os.rename(tmp, dest)
        except OSError:
            # a stale or concurrent tree is in the way: replace a stale one,
            # keep a complete one another process just renamed into place
            if (dest / MARKER).is_file() and (dest / MARKER).read_text() == stamp \
                    and _tree_problem(dest, machine) is None:
                return KernelHeaders(True, str(dest), note=f"merged Debian headers {ver} (cached in {dest})")
            old = root / f".{dest.name}.old.{os.getpid()}"
            os.rename(dest, old)
            os.rename(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        return KernelHeaders(True, str(dest), note=f"merged Debian headers {ver} into {dest}", built=True)
    except OSError as exc:
        return KernelHeaders(False, None, reason=f"cannot build merged headers in {root}: {exc.strerror or exc}")
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def find_kernel_headers(release: str | None = None, *, machine: str | None = None,
                        modules_root: Path = Path("/lib/modules"), src_root: Path = Path("/usr/src"),
                        sys_kernel: Path = Path("/sys/kernel"), cache: Path | None = None,
                        environ: Mapping[str, str] | None = None) -> KernelHeaders:
    """Find (or build) the header tree bcc should compile against."""
    env = os.environ if environ is None else environ
    release = release or os.uname().release
    machine = machine or platform.machine()
    given = env.get("BCC_KERNEL_SOURCE")
    if given:
        if Path(given, "include").is_dir():
            return KernelHeaders(True, given, note=f"BCC_KERNEL_SOURCE={given}")
        return KernelHeaders(False, None, reason=f"BCC_KERNEL_SOURCE={given} has no include/ directory")
    for sub in ("build", "source"):
        p = modules_root / release / sub
        if (p / "include").is_dir():
            return KernelHeaders(True, None, note=f"{p}")
    if (sys_kernel / "kheaders.tar.xz").is_file():
        return KernelHeaders(True, None, note=f"{sys_kernel}/kheaders.tar.xz (CONFIG_IKHEADERS)")
    pairs = debian_pairs(src_root, machine)
    if not pairs:
        fl = FLAVOURS.get(machine, ("<flavour>",))[0]
        return KernelHeaders(
            False, None,
            reason=f"no kernel headers for {release}: {modules_root}/{release}/build and "
                   f"{sys_kernel}/kheaders.tar.xz are missing and {src_root} has no "
                   f"linux-headers-*-common + linux-headers-*-{fl} pair (apt-get install linux-headers-{fl})")
    ver, common, flavour = pairs[0]
    root = cache if cache is not None else cache_root(environ=env)
    return _build(ver, common, flavour, root, machine)
