"""Build step that pyproject.toml cannot express: the plain C library libfips.

pyproject.toml declares the Python binding ``fipstop._fips`` in
``[[tool.setuptools.ext-modules]]``; setuptools merges that with this file.
Here ``build_ext`` additionally builds ``fipstop/lib/libfips.so.1`` (soname
libfips.so.1) from ``fipstop/csrc/fips.c`` with the compiler setuptools uses and
the binding's own compile flags, plus the link name ``libfips.so`` beside it,
and copies the public header to ``fipstop/include/fips.h``, so C programs can
build against the ring the binding uses:

    cc prog.c $(python -m fipstop.ring --cflags) $(python -m fipstop.ring --libs)

Only ``fips_*`` symbols are exported (a linker version script, not
-fvisibility). ``pip install .`` puts the library in the installed package;
``pip install -e .`` and ``python setup.py build_ext --inplace`` (``make lib``)
put them in the source tree (``fipstop/lib/``, ``fipstop/include/``; not in git).
"""

from __future__ import annotations

import copy
import filecmp
import glob
import os
import shutil
import subprocess
import sysconfig

from setuptools import setup
from setuptools.command.build_ext import build_ext as _build_ext
from setuptools.errors import SetupError
from setuptools.modified import newer_group

BINDING = "fipstop._fips"
SONAME = "libfips.so.1"
LINKNAME = "libfips.so"
LIB_SOURCES = ["fipstop/csrc/fips.c"]
PUBLIC_HEADERS = ["fipstop/csrc/fips.h"]  # installed as fipstop/include/fips.h
VERSION_SCRIPT = "{\n  global: fips_*;\n  local: *;\n};\n"
# The LD_PRELOAD syslog(3) drop-in: libfips compiled in (one file to preload),
# exporting only the syslog API so it never interposes on a program's own
# libfips.
SHIM = "libfips_syslog.so"
SHIM_SOURCES = ["fipstop/csrc/fips_syslog.c", "fipstop/csrc/fips.c"]
SHIM_VERSION_SCRIPT = (
    "{\n  global: openlog; closelog; setlogmask; syslog; vsyslog; __syslog_chk;"
    " __vsyslog_chk; fips_syslog_dropped;\n  local: *;\n};\n"
)
# The BIND 9 query-log preload (`fipstop wrap --bind`): the drop-in above plus
# ns_client_log/ns_client_logv (fips_bind.c includes fips_syslog.c). Its struct
# offsets come from BIND's own headers (Debian's bind9-dev), so it is built only
# where they are, and it refuses at run time a libns other than the one they
# belong to (FIPS_BIND_LIBNS, the file libns.so points to at build time).
BIND_SHIM = "libfips_bind.so"
BIND_SOURCES = ["fipstop/csrc/fips_bind.c", "fipstop/csrc/fips_bind_layout.c", "fipstop/csrc/fips.c"]
BIND_DEPENDS = ["fipstop/csrc/fips_syslog.c", "fipstop/csrc/fips_bindq.h"]
BIND_HEADER = "ns/client.h"
BIND_VERSION_SCRIPT = (
    "{\n  global: openlog; closelog; setlogmask; syslog; vsyslog; __syslog_chk; __vsyslog_chk;"
    " fips_syslog_dropped; ns_client_log; ns_client_logv; fips_bind_lines; fips_bind_active;"
    " fips_bind_native_refused;\n  local: *;\n};\n"
)
# The same file for a named built with contrib/bind/fips-native.patch (scripts/build-named-native.sh): only its
# binary query hook, ns_client_log/ns_client_logv not exported (so not interposed: libns keeps its direct calls).
BIND_NATIVE_SHIM = "libfips_bindq.so"
BIND_NATIVE_VERSION_SCRIPT = (
    "{\n  global: openlog; closelog; setlogmask; syslog; vsyslog; __syslog_chk; __vsyslog_chk;"
    " fips_syslog_dropped; fips_bind_lines; fips_bind_active; fips_bind_native_refused;\n  local: *;\n};\n"
)
# `fipstop demo`'s producer: a C program linked to libfips.so (rpath $ORIGIN,
# so it runs from fipstop/lib/ wherever the package is installed).
DEMO = "fips-demo-producer"
DEMO_SOURCES = ["fipstop/csrc/demo_producer.c"]


class build_ext(_build_ext):
    """build_ext that also builds fipstop/lib/libfips.so."""

    def run(self) -> None:
        super().run()  # the binding (and its in-place copy when editable)
        self.build_libfips()

    # -- paths -------------------------------------------------------------

    def _lib_build_dir(self) -> str:
        return os.path.join(self.build_lib, "fipstop", "lib")

    def _lib_source_dir(self) -> str:
        build_py = self.get_finalized_command("build_py")
        return os.path.join(build_py.get_package_dir("fipstop"), "lib")

    def _include_build_dir(self) -> str:
        return os.path.join(self.build_lib, "fipstop", "include")

    def _include_source_dir(self) -> str:
        build_py = self.get_finalized_command("build_py")
        return os.path.join(build_py.get_package_dir("fipstop"), "include")

    def _lib_outputs(self) -> list[str]:
        d = self._lib_build_dir()
        outs = [os.path.join(d, SONAME), os.path.join(d, LINKNAME), os.path.join(d, SHIM), os.path.join(d, DEMO)]
        if _bind_libns() is not None:
            outs += [os.path.join(d, BIND_SHIM), os.path.join(d, BIND_NATIVE_SHIM)]
        return outs

    def _header_outputs(self) -> list[str]:
        d = self._include_build_dir()
        return [os.path.join(d, os.path.basename(h)) for h in PUBLIC_HEADERS]

    # -- setuptools output bookkeeping (install records, editable wheels) ---

    def get_outputs(self) -> list[str]:
        return [*super().get_outputs(), *self._lib_outputs(), *self._header_outputs()]

    def get_output_mapping(self) -> dict[str, str]:
        mapping = super().get_output_mapping()
        if self.inplace:
            src = self._lib_source_dir()
            for out in self._lib_outputs():
                mapping[out] = os.path.join(src, os.path.basename(out))
            inc = self._include_source_dir()
            for out in self._header_outputs():
                mapping[out] = os.path.join(inc, os.path.basename(out))
        return mapping

    # -- the build -----------------------------------------------------------

    def _binding(self):
        for ext in self.extensions:
            if ext.name == BINDING:
                return ext
        raise SetupError(f"extension {BINDING} is not declared in pyproject.toml")

    def _lib_compiler(self):
        """A copy of the compiler setuptools used for the binding, whose shared
        link command keeps none of the interpreter's own -L/-rpath entries
        (pyenv puts its lib dir there): libfips does not need Python."""
        compiler = self.compiler
        if compiler is None or isinstance(compiler, str):
            from distutils.ccompiler import new_compiler
            from distutils.sysconfig import customize_compiler

            compiler = new_compiler(compiler=compiler, dry_run=self.dry_run, force=self.force)
            customize_compiler(compiler)
        compiler = copy.copy(compiler)
        linker_so = getattr(compiler, "linker_so", None)
        pylib = sysconfig.get_config_var("LIBDIR")
        if linker_so and pylib:
            drop = {f"-L{pylib}", f"-Wl,-rpath,{pylib}", f"-Wl,-rpath={pylib}"}
            compiler.set_executable("linker_so", [a for a in linker_so if a not in drop])
        return compiler

    def build_libfips(self) -> None:
        ext = self._binding()
        out_dir = self._lib_build_dir()
        target = os.path.join(out_dir, SONAME)
        self._build_shared(LIB_SOURCES, SONAME, VERSION_SCRIPT, out_dir, ext, [], soname=SONAME)
        _symlink(SONAME, os.path.join(out_dir, LINKNAME))
        self._build_shared(SHIM_SOURCES, SHIM, SHIM_VERSION_SCRIPT, out_dir, ext, ["dl"])
        libns = _bind_libns()
        if libns is None:
            print(f"setup.py: {BIND_SHIM} not built: no BIND headers ({BIND_HEADER}) and libns.so "
                  "(apt-get install bind9-dev)")
        else:
            self._build_shared(BIND_SOURCES, BIND_SHIM, BIND_VERSION_SCRIPT, out_dir, ext, ["dl"],
                               macros=[("FIPS_BIND_LIBNS", f'"{libns}"'), ("HAVE_STDATOMIC_H", "1")],
                               extra_depends=BIND_DEPENDS)
            self._build_shared(BIND_SOURCES, BIND_NATIVE_SHIM, BIND_NATIVE_VERSION_SCRIPT, out_dir, ext, ["dl"],
                               macros=[("FIPS_BIND_LIBNS", f'"{libns}"'), ("HAVE_STDATOMIC_H", "1"),
                                       ("FIPS_BIND_NATIVE_ONLY", "1")],
                               extra_depends=BIND_DEPENDS)
        self._build_demo(out_dir, ext)
        for header, out in zip(PUBLIC_HEADERS, self._header_outputs()):
            _replace_copy(header, out)

        if self.inplace:
            src = self._lib_source_dir()
            _replace_copy(target, os.path.join(src, SONAME))
            _symlink(SONAME, os.path.join(src, LINKNAME))
            _replace_copy(os.path.join(out_dir, SHIM), os.path.join(src, SHIM))
            if libns is not None:
                _replace_copy(os.path.join(out_dir, BIND_SHIM), os.path.join(src, BIND_SHIM))
                _replace_copy(os.path.join(out_dir, BIND_NATIVE_SHIM), os.path.join(src, BIND_NATIVE_SHIM))
            _replace_copy(os.path.join(out_dir, DEMO), os.path.join(src, DEMO))
            inc = self._include_source_dir()
            for out in self._header_outputs():
                _replace_copy(out, os.path.join(inc, os.path.basename(out)))

    def _build_shared(self, sources, name, version_script_text, out_dir, ext, extra_libs, soname=None,
                      macros=None, extra_depends=()) -> None:
        """Build one shared object (with a soname if given) when its sources changed."""
        target = os.path.join(out_dir, name)
        depends = list(sources) + list(extra_depends) + sorted(glob.glob("fipstop/csrc/*.h"))
        if not (self.force or newer_group(depends, target, missing="newer")):
            return
        tmp = os.path.join(self.build_temp, name.replace(".", "_"))
        os.makedirs(tmp, exist_ok=True)
        os.makedirs(out_dir, exist_ok=True)
        version_script = os.path.join(tmp, "exports.map")
        with open(version_script, "w", encoding="ascii") as f:
            f.write(version_script_text)
        compiler = self._lib_compiler()
        objects = compiler.compile(
            list(sources),
            output_dir=tmp,
            macros=list(macros or []),
            include_dirs=list(ext.include_dirs),
            extra_postargs=list(ext.extra_compile_args),
            depends=depends,
            debug=self.debug,
        )
        compiler.link_shared_object(
            objects,
            name,
            output_dir=out_dir,
            libraries=[*ext.libraries, *extra_libs],
            library_dirs=list(ext.library_dirs),
            extra_postargs=[
                *([f"-Wl,-soname,{soname}"] if soname else []),
                f"-Wl,--version-script={version_script}",
                "-Wl,--no-undefined",
                *ext.extra_link_args,
            ],
            debug=self.debug,
            target_lang="c",
        )


    def _build_demo(self, out_dir, ext) -> None:
        """The demo producer, linked to the libfips.so beside it."""
        target = os.path.join(out_dir, DEMO)
        depends = [*DEMO_SOURCES, os.path.join(out_dir, SONAME), *sorted(glob.glob("fipstop/csrc/*.h"))]
        if not (self.force or newer_group(depends, target, missing="newer")):
            return
        tmp = os.path.join(self.build_temp, DEMO.replace("-", "_"))
        os.makedirs(tmp, exist_ok=True)
        compiler = self._lib_compiler()
        objects = compiler.compile(list(DEMO_SOURCES), output_dir=tmp, include_dirs=list(ext.include_dirs),
                                   extra_postargs=list(ext.extra_compile_args), depends=depends, debug=self.debug)
        compiler.link_executable(objects, DEMO, output_dir=out_dir, libraries=["fips", "pthread"],
                                 library_dirs=[out_dir], extra_postargs=["-Wl,-rpath,$ORIGIN"],
                                 debug=self.debug, target_lang="c")


def _bind_libns() -> str | None:
    """The file name of the libns that BIND's installed headers belong to
    (what libns.so links to, e.g. libns-9.18.49-1~deb12u3-Debian.so), or None
    when the headers or the library are not installed."""
    if not any(os.path.exists(os.path.join(d, BIND_HEADER)) for d in ("/usr/include", "/usr/local/include")):
        return None
    try:
        out = subprocess.run([os.environ.get("CC", "cc"), "-print-file-name=libns.so"], capture_output=True,
                             text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    if not out or not os.path.isabs(out) or not os.path.exists(out):
        return None
    name = os.path.basename(os.path.realpath(out))
    return name if name.startswith("libns") and '"' not in name and "\\" not in name else None


def _replace_copy(src: str, dst: str) -> None:
    """Copy to a new inode and rename over dst: never truncate a library that a
    running program may have mapped. Skipped when dst is already the same."""
    if os.path.exists(dst) and filecmp.cmp(src, dst, shallow=False):
        return
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    tmp = f"{dst}.tmp{os.getpid()}"
    shutil.copy2(src, tmp)
    os.replace(tmp, dst)


def _symlink(target: str, link: str) -> None:
    if os.path.islink(link) and os.readlink(link) == target:
        return
    tmp = f"{link}.tmp{os.getpid()}"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, link)


setup(cmdclass={"build_ext": build_ext})
