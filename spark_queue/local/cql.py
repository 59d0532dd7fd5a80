"""The few CQL conversations the CLI, the Makefile and the tests need outside the queue engine.

Ask a host its version, create the keyspace the queue lives in (with its tables),
drop a scratch keyspace. Every function opens its own short-lived connection from a
:class:`~spark_queue.config.ConnectionSettings` and closes it again: these run
once per command or per test, never on a hot path.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from spark_queue.config import ConnectionSettings, HostPort, check_keyspace
from spark_queue.errors import BackendUnavailable

if TYPE_CHECKING:
    from cassandra.cluster import Session

log = logging.getLogger(__name__)


@contextlib.contextmanager
def connect(settings: ConnectionSettings, *, only: HostPort | None = None) -> Iterator[Session]:
    """A driver session for ``settings``, shut down when the block ends.

    Args:
        settings: Contact points, credentials and timeouts.
        only: Talk to this one host and no other (for per-node probes).

    Raises:
        BackendUnavailable: No contact point answered.
    """
    from cassandra import DriverException
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, ExecutionProfile, NoHostAvailable
    from cassandra.policies import (
        DCAwareRoundRobinPolicy,
        TokenAwarePolicy,
        WhiteListRoundRobinPolicy,
    )

    from spark_queue.store.driver_errors import no_host_message
    from spark_queue.store.session import new_cluster

    hosts = (only,) if only else settings.hosts
    policy = (
        WhiteListRoundRobinPolicy([only.host])
        if only
        else TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=settings.local_dc or ""))
    )
    cluster = new_cluster(
        settings,
        [(h.host, h.port) for h in hosts],
        execution_profiles={
            EXEC_PROFILE_DEFAULT: ExecutionProfile(
                load_balancing_policy=policy, request_timeout=settings.request_timeout
            )
        },
    )
    try:
        try:
            session = cluster.connect()
        except NoHostAvailable as e:
            where = ", ".join(str(h) for h in hosts)
            raise BackendUnavailable(f"Cassandra at {where}: {no_host_message(e)}") from e
        except (DriverException, OSError) as e:
            where = ", ".join(str(h) for h in hosts)
            raise BackendUnavailable(
                f"Cassandra at {where}: no host answered ({e}); start the local node with"
                " 'bdq cassandra start', or point BDQ_CASSANDRA_HOSTS at a running cluster"
            ) from e
        yield session
    finally:
        cluster.shutdown()


def release_version(settings: ConnectionSettings, host: HostPort) -> str | None:
    """Cassandra's ``release_version`` as reported by ``host``, or None if it does not answer.

    Args:
        settings: Credentials and timeouts (its hosts are ignored).
        host: The node to ask.
    """
    from cassandra import DriverException

    quiet = logging.getLogger("cassandra")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # a node that is down is an answer here, not an error
    try:
        with connect(settings, only=host) as session:
            row = session.execute("SELECT release_version FROM system.local").one()
            return str(row.release_version) if row else None
    except (BackendUnavailable, DriverException, OSError):
        return None
    finally:
        quiet.setLevel(level)


def _session(
    settings: ConnectionSettings, session: Session | None
) -> contextlib.AbstractContextManager[Session]:
    return contextlib.nullcontext(session) if session is not None else connect(settings)


def ensure_keyspace(settings: ConnectionSettings, *, session: Session | None = None) -> bool:
    """Create ``settings.keyspace`` and its queue tables unless they exist.

    Replication is SimpleStrategy with ``settings.replication_factor``, or
    NetworkTopologyStrategy in ``settings.local_dc`` when that is set. An existing
    keyspace keeps its replication; only its missing tables and columns are made.
    For the local node and the tests; users create keyspaces with ``bdq keyspace create``.

    Args:
        settings: Where, which keyspace and with what replication factor.
        session: An open session to reuse (its own hosts win); None opens one.

    Returns:
        True if this call created the keyspace, False if it was there already.

    Raises:
        BackendUnavailable: The cluster could not be reached.
    """
    from spark_queue.store.keyspace import create_keyspace, local_replication

    with _session(settings, session) as s:
        report = create_keyspace(
            s,
            settings.keyspace,
            local_replication(settings),
            exist_ok=True,
            compare_replication=False,
            timeout=max(60.0, settings.request_timeout),
        )
        return report.created


def drop_keyspace(settings: ConnectionSettings, *, session: Session | None = None) -> None:
    """Drop ``settings.keyspace`` and everything in it, if it exists.

    Args:
        settings: Where, and which keyspace.
        session: An open session to reuse (its own hosts win); None opens one.

    Raises:
        BackendUnavailable: The cluster could not be reached.
    """
    keyspace = check_keyspace(settings.keyspace)
    with _session(settings, session) as s:
        s.execute(f"DROP KEYSPACE IF EXISTS {keyspace}")
