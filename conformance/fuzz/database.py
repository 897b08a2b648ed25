"""Where a fuzzing run keeps what hypothesis stores (issue 22, items 4 and 5).

- hypothesis' own folder (its ``.hypothesis/``: the constants it collects from the code under test, and the
  example database when none is named) is :func:`hypothesis_home`, under the harness cache
  (:func:`conformance.core.paths.cache_dir`), never the current folder: :func:`hypothesis_storage` points
  hypothesis there for the length of a run;
- the example database is a folder (``--database DIR``) or a Redis database (``--database
  redis://HOST:PORT/N``, hypothesis' ``RedisExampleDatabase``) that several machines share: every failure
  one of them finds is saved there and replayed first by the others (:func:`open_database`). Without
  ``--database`` the CLI uses :func:`default_database` (under the cache), except with ``--seed``: a seeded
  run is the same run wherever it is made, so it reads no corpus left by earlier runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from hypothesis import configuration
from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from conformance.core.errors import InputError
from conformance.core.paths import cache_dir

#: the URL schemes of a Redis database (``rediss``: over TLS)
REDIS_SCHEMES = ("redis", "rediss")
#: Redis' default port
REDIS_PORT = 6379
#: a Redis server that does not answer within this many seconds is not reachable
REDIS_TIMEOUT_S = 5.0


def hypothesis_home() -> Path:
    """hypothesis' folder for fuzzing runs: ``cache_dir()/fuzz/hypothesis`` (what hypothesis would put in
    ``./.hypothesis``)."""
    return cache_dir() / "fuzz" / "hypothesis"


def default_database() -> Path:
    """The example folder used when ``--database`` names none: ``examples`` in :func:`hypothesis_home`
    (where hypothesis keeps it in its own folder)."""
    return hypothesis_home() / "examples"


@contextlib.contextmanager
def hypothesis_storage(home: Path | None = None) -> Iterator[None]:
    """hypothesis stores under ``home`` (default :func:`hypothesis_home`) while the block runs, and where it
    stored before after it."""
    before = configuration.storage_directory(intent_to_write=False).home_directory
    configuration.set_hypothesis_home_dir(home if home is not None else hypothesis_home())
    try:
        yield
    finally:
        configuration.set_hypothesis_home_dir(before)


def is_redis_url(spec: str | Path) -> bool:
    return isinstance(spec, str) and spec.partition("://")[0].lower() in REDIS_SCHEMES and "://" in spec


def redis_address(url: str) -> tuple[str, int, int]:
    """``(host, port, database number)`` of ``redis://HOST[:PORT][/N]``; a URL that is not one is one
    :class:`InputError` line naming what is wrong."""
    where = f"--database {url!r}"
    parts = urlsplit(url)
    if parts.scheme.lower() not in REDIS_SCHEMES:
        raise InputError(f"{where}: not a redis:// URL")
    if parts.query or parts.fragment:
        raise InputError(f"{where}: a Redis URL is redis://HOST:PORT/N, with no '?' or '#' part")
    try:
        port = parts.port
    except ValueError:
        raise InputError(f"{where}: the port is not a number from 0 to 65535") from None
    host = parts.hostname
    if not host:
        raise InputError(f"{where}: names no host (redis://HOST:PORT/N)")
    number = parts.path.strip("/") or "0"
    if not number.isdigit() or not number.isascii():
        raise InputError(f"{where}: the database {number!r} is not a number (redis://HOST:PORT/N)")
    return host, port if port is not None else REDIS_PORT, int(number)


def redis_database(url: str) -> ExampleDatabase:
    """hypothesis' Redis example database at ``url``, after one PING: an address that does not answer is
    one :class:`InputError` line (before any example runs), as is a missing ``redis`` package."""
    host, port, number = redis_address(url)
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
    except ImportError:
        raise InputError(
            f"--database {url!r}: the 'redis' Python package is not installed (pip install redis)"
        ) from None
    client = redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S)
    try:
        client.ping()
    except redis.RedisError as exc:
        client.close()
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"--database {url!r}: no Redis server answers at {host}:{port} (db {number}): "
                         f"{reason}") from None  # fmt: skip
    return RedisExampleDatabase(client)


def open_database(spec: str | Path) -> ExampleDatabase:
    """The example database ``spec`` names: a ``redis://`` URL (:func:`redis_database`) or a folder."""
    if is_redis_url(spec):
        return redis_database(str(spec))
    if not str(spec):
        raise InputError("--database '': names no folder nor redis://HOST:PORT/N URL")
    if isinstance(spec, str) and "://" in spec:
        raise InputError(f"--database {spec!r}: not a folder nor a redis://HOST:PORT/N URL")
    folder = Path(spec)
    if folder.exists() and not folder.is_dir():
        raise InputError(f"--database {str(folder)!r}: not a folder")
    return DirectoryBasedExampleDatabase(str(folder))
