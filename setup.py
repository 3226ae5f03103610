"""The wheel's build step: the Rust binaries ``txcached`` and ``txcache-agent`` go in as scripts.

Everything else (metadata, dependencies, packages) is in ``pyproject.toml``; this adds what it
cannot declare. Building a wheel runs ``cargo build --release --locked --workspace --bins``
(``make build``'s command, so a no-op after it; ``$CARGO`` names another cargo) and copies both
binaries, without their debug info, into the wheel's ``scripts``: pip installs them next to the
``txcache`` command, on the ``PATH`` of whoever has that on theirs. The wheel is then tagged
for the platform the binaries run on (``py3-none-manylinux_2_N_x86_64`` when they need only
the C library and its companions, else ``py3-none-linux_x86_64``), not ``py3-none-any``.

An editable install (``pip install -e .``, the Makefile's ``venv``) skips all this: a checkout
runs the binaries ``make build`` leaves in ``target/release`` (``txcache.stack.find_binary``).
An sdist carries the Rust sources and ``docs/`` (``MANIFEST.in``), never the binaries; the
wheel carries ``docs/*.md`` as ``txcache/docs`` (what ``txcache docs`` prints).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
BINARIES = ("txcached", "txcache-agent")
CARGO_BUILD = ("build", "--release", "--locked", "--workspace", "--bins")

# The libraries a manylinux wheel may link against without carrying them (PEP 600's policy:
# the C library and its companions, present on every glibc system).
_SYSTEM_LIBRARIES = re.compile(
    r"(linux-vdso|ld-linux[\w-]*|libc|libm|libdl|librt|libpthread|libgcc_s|libutil|libresolv)"
    r"\.so(\.\d+)*"
)

_build_scripts = Distribution().get_command_class("build_scripts")


class BuildBinaries(_build_scripts):
    """``build_scripts``: build the binaries with cargo and copy them to the build directory."""

    editable_mode = False  # set by setuptools for `pip install -e`

    def run(self) -> None:
        build_dir = Path(self.build_dir)
        build_dir.mkdir(parents=True, exist_ok=True)  # install_scripts copies it, even empty
        if self.editable_mode:
            return
        cargo = os.environ.get("CARGO", "cargo")
        if shutil.which(cargo) is None:
            raise SystemExit(
                f"building txcache's wheel compiles {' and '.join(BINARIES)} with cargo, and "
                f"{cargo!r} is not on PATH: install Rust (https://rustup.rs), or set $CARGO"
            )
        subprocess.run([cargo, *CARGO_BUILD], cwd=ROOT, check=True)
        strip = shutil.which("strip")
        for name in BINARIES:
            target = build_dir / name
            shutil.copyfile(ROOT / "target" / "release" / name, target)
            target.chmod(0o755)
            if strip:  # the release profile keeps line tables for profiling: not in a wheel
                subprocess.run([strip, "--strip-debug", str(target)], check=True)

    def get_source_files(self) -> list[str]:
        return []  # an sdist carries the sources, not the binaries

    def get_outputs(self) -> list[str]:
        return [str(Path(self.build_dir) / name) for name in BINARIES]


class BuildPackageWithDocs(build_py):
    """``build_py``: the package, with ``docs/*.md`` as ``txcache/docs`` — the documents its
    messages cite, which ``txcache docs`` prints. A checkout (editable) reads ``docs/``."""

    editable_mode = False  # set by setuptools for `pip install -e`

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        target = Path(self.build_lib) / "txcache" / "docs"
        target.mkdir(parents=True, exist_ok=True)
        for document in sorted((ROOT / "docs").glob("*.md")):
            shutil.copyfile(document, target / document.name)


class PlatformWheel(bdist_wheel):
    """A wheel tagged for the binaries' platform: any Python 3, no ABI, this OS and CPU."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        if not self.plat_name_supplied:
            built = Path(self.get_finalized_command("build_scripts").build_dir)
            platform = _platform_tag([built / name for name in BINARIES], platform)
        return "py3", "none", platform


def _platform_tag(binaries: list[Path], default: str) -> str:
    """``manylinux_2_N_<arch>`` if ``binaries`` link only the C library and its companions
    (N: the newest glibc symbol version they use), else ``default``."""
    arch = sysconfig.get_platform().removeprefix("linux-").replace("-", "_")
    if not default.startswith("linux_") or not all(path.is_file() for path in binaries):
        return default
    minors: list[int] = []
    for path in binaries:
        try:
            linked = subprocess.run(
                ["ldd", str(path)], capture_output=True, text=True, check=True
            ).stdout
        except (OSError, subprocess.CalledProcessError):
            return default  # not glibc's ldd (musl, or none): no manylinux claim
        libraries = [line.split()[0] for line in linked.splitlines() if line.strip()]
        if not all(_SYSTEM_LIBRARIES.fullmatch(Path(lib).name) for lib in libraries):
            return default
        minors += [int(m) for m in re.findall(rb"GLIBC_2\.(\d+)", path.read_bytes())]
    return f"manylinux_2_{max(minors, default=17)}_{arch}"


setup(
    scripts=[f"target/release/{name}" for name in BINARIES],
    cmdclass={
        "build_scripts": BuildBinaries,
        "build_py": BuildPackageWithDocs,
        "bdist_wheel": PlatformWheel,
    },
)
