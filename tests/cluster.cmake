# Tests of cluster/ (NATS JetStream through libnats). test_cluster starts its own nats-server
# processes (one, then a 3-server JetStream cluster) with temporary stores on free loopback
# ports, and skips (77) where nats-server is not installed. Label `nats` lets CI place them;
# they take about 20 s and run in every build, sanitizers included (the servers are separate
# processes, the client side is small). test_session_records checks that the frame the cluster
# publishes is the ingest log's record, byte for byte.
rill_test(test_cluster SOURCES test_cluster.c LIBS rill_cluster PkgConfig::NATS
          LABELS "integration;nats" TIMEOUT 240)
rill_test(test_session_records SOURCES test_session_records.c LIBS rill_sessions LABELS unit
          TIMEOUT 60)
