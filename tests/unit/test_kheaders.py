"""The merged kernel-header tree bcc compiles against (fipstop.profile.kheaders),
built from fixture trees shaped like Debian's linux-headers packages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fipstop.profile import kheaders
from fipstop.profile.kheaders import cache_root, debian_pairs, find_kernel_headers, merge_trees


def _debian_tree(src: Path, ver: str = "6.1.0-57", flavour: str = "amd64") -> tuple[Path, Path]:
    common = src / f"linux-headers-{ver}-common"
    arch = src / f"linux-headers-{ver}-{flavour}"
    for rel, text in {
        "include/linux/kconfig.h": "common kconfig",
        "include/linux/sched.h": "sched",
        "arch/x86/include/asm/ptrace.h": "ptrace",
        "Makefile": "common makefile",
        "scripts/common-only": "x",
    }.items():
        (common / rel).parent.mkdir(parents=True, exist_ok=True)
        (common / rel).write_text(text)
    for rel, text in {
        "include/generated/autoconf.h": "#define CONFIG_X86 1",
        "arch/x86/include/generated/asm/foo.h": "gen",
        "Makefile": f"include {common}/Makefile",
        ".config": "CONFIG_X86=y",
    }.items():
        (arch / rel).parent.mkdir(parents=True, exist_ok=True)
        (arch / rel).write_text(text)
    kbuild = src / "kbuild-scripts"
    kbuild.mkdir(parents=True, exist_ok=True)
    (kbuild / "mod.sh").write_text("kbuild")
    os.symlink(kbuild, arch / "scripts")  # Debian: scripts -> ../../lib/linux-kbuild-*/scripts
    return common, arch


def _no_env() -> dict[str, str]:
    return {"HOME": "/nonexistent"}


def test_merge_prefers_the_flavour_and_merges_symlinked_dirs(tmp_path: Path) -> None:
    common, arch = _debian_tree(tmp_path / "src")
    dest = tmp_path / "merged"
    n = merge_trees([common, arch], dest)
    assert n >= 7
    assert (dest / "Makefile").read_text().startswith("include ")  # the flavour's wins
    assert (dest / "include/linux/kconfig.h").read_text() == "common kconfig"
    assert (dest / "include/generated/autoconf.h").is_symlink()
    # a real dir in common and a symlinked dir in the flavour: both contents
    assert (dest / "scripts/common-only").exists() and (dest / "scripts/mod.sh").read_text() == "kbuild"
    assert (dest / ".config").exists()


def test_builds_once_atomically_and_reuses(tmp_path: Path) -> None:
    src = tmp_path / "src"
    _debian_tree(src, "6.1.0-50")
    _debian_tree(src, "6.1.0-57")
    cache = tmp_path / "cache"
    kw = dict(release="6.18.44-test", machine="x86_64", modules_root=tmp_path / "mods",
              src_root=src, sys_kernel=tmp_path / "sys", cache=cache, environ=_no_env())
    kh = find_kernel_headers(**kw)
    assert kh.ok and kh.built, kh
    assert kh.env == str(cache / "kheaders-6.1.0-57-amd64"), "newest pair first"
    assert Path(kh.env, "include/linux/kconfig.h").exists()
    assert [p.name for p in cache.iterdir()] == ["kheaders-6.1.0-57-amd64"], "no temp dir left behind"
    again = find_kernel_headers(**kw)
    assert again.ok and not again.built and again.env == kh.env
    # a broken cached tree (marker but files gone) is rebuilt
    (Path(kh.env) / "include/generated/autoconf.h").unlink()
    third = find_kernel_headers(**kw)
    assert third.ok and third.built
    assert Path(third.env, "include/generated/autoconf.h").exists()
    assert sorted(p.name for p in cache.iterdir()) == ["kheaders-6.1.0-57-amd64"]


def test_existing_build_dir_and_env_win(tmp_path: Path) -> None:
    mods = tmp_path / "mods" / "6.18.0" / "build" / "include"
    mods.mkdir(parents=True)
    kh = find_kernel_headers("6.18.0", machine="x86_64", modules_root=tmp_path / "mods",
                             src_root=tmp_path / "none", sys_kernel=tmp_path, cache=tmp_path / "c", environ={})
    assert kh.ok and kh.env is None and "build" in kh.note
    env = {"BCC_KERNEL_SOURCE": str(tmp_path / "mods" / "6.18.0" / "build")}
    kh = find_kernel_headers("x", machine="x86_64", modules_root=tmp_path, src_root=tmp_path, environ=env)
    assert kh.ok and kh.env == env["BCC_KERNEL_SOURCE"]
    kh = find_kernel_headers("x", machine="x86_64", environ={"BCC_KERNEL_SOURCE": str(tmp_path / "nope")})
    assert not kh.ok and "BCC_KERNEL_SOURCE" in kh.reason


def test_ikheaders_lets_bcc_find_its_own(tmp_path: Path) -> None:
    (tmp_path / "kheaders.tar.xz").write_bytes(b"")
    kh = find_kernel_headers("6.18.0", machine="x86_64", modules_root=tmp_path / "m", src_root=tmp_path / "s",
                             sys_kernel=tmp_path, environ={})
    assert kh.ok and kh.env is None and "IKHEADERS" in kh.note


def test_nothing_found_says_what_is_missing(tmp_path: Path) -> None:
    kh = find_kernel_headers("6.18.44-fc", machine="x86_64", modules_root=tmp_path / "m", src_root=tmp_path / "s",
                             sys_kernel=tmp_path / "k", cache=tmp_path / "c", environ={})
    assert not kh.ok
    assert "\n" not in kh.reason
    for part in ("6.18.44-fc", "build", "kheaders.tar.xz", "linux-headers-amd64"):
        assert part in kh.reason


def test_incomplete_pair_is_reported(tmp_path: Path) -> None:
    common, arch = _debian_tree(tmp_path / "src")
    (arch / "include/generated/autoconf.h").unlink()
    kh = find_kernel_headers("6.18", machine="x86_64", modules_root=tmp_path / "m", src_root=tmp_path / "src",
                             sys_kernel=tmp_path / "k", cache=tmp_path / "c", environ={})
    assert not kh.ok and "autoconf.h" in kh.reason and "incomplete" in kh.reason
    assert not any((tmp_path / "c").iterdir()), "the failed temp tree was removed"


def test_unwritable_cache_is_a_reason(tmp_path: Path) -> None:
    _debian_tree(tmp_path / "src")
    blocker = tmp_path / "file"
    blocker.write_text("")
    kh = find_kernel_headers("6.18", machine="x86_64", modules_root=tmp_path / "m", src_root=tmp_path / "src",
                             sys_kernel=tmp_path / "k", cache=blocker / "sub", environ={})
    assert not kh.ok and "cache" in kh.reason


def test_pairs_and_cache_root(tmp_path: Path) -> None:
    _debian_tree(tmp_path, "6.1.0-9")
    _debian_tree(tmp_path, "6.1.0-10")
    (tmp_path / "linux-headers-6.2.0-1-amd64").mkdir()  # no -common: not a pair
    assert [v for v, _, _ in debian_pairs(tmp_path, "x86_64")] == ["6.1.0-10", "6.1.0-9"]
    assert debian_pairs(tmp_path, "aarch64") == []
    assert cache_root(uid=0) == Path("/var/cache/fipstop")
    assert cache_root(uid=1000, environ={"XDG_CACHE_HOME": "/x"}) == Path("/x/fipstop")
    assert cache_root(uid=1000, environ={"HOME": "/home/u"}) == Path("/home/u/.cache/fipstop")


@pytest.mark.skipif(not Path("/usr/src").is_dir(), reason="no /usr/src")
def test_module_has_no_heavy_imports() -> None:
    assert "bcc" not in vars(kheaders)
