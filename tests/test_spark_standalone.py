"""StandaloneCluster's argument and state checks (no JVM: the cluster tier starts real ones)."""

from __future__ import annotations

import pytest

from rvasync.errors import InvalidArgument
from rvasync.spark.standalone import ClusterError, StandaloneCluster


def test_a_cluster_needs_a_worker_with_a_core():
    with pytest.raises(InvalidArgument, match="at least one worker"):
        StandaloneCluster(workers=0)
    with pytest.raises(InvalidArgument, match="at least one worker"):
        StandaloneCluster(cores_per_worker=0)


def test_workers_cannot_be_restarted_before_start_or_after_stop():
    cluster = StandaloneCluster()
    with pytest.raises(ClusterError, match="not started"):
        cluster.restart_workers()
    cluster.stop()  # harmless on a cluster never started, and repeatable
    cluster.stop()
    with pytest.raises(ClusterError, match="already stopped"):
        cluster.restart_workers()
