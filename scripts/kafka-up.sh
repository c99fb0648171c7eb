#!/usr/bin/env bash
# Starts a real single-node Apache Kafka broker (KRaft, combined broker+controller) from the
# jars listed in scripts/kafka/pom.xml and prints its bootstrap address on stdout.
# Already running: just prints the bootstrap address.
#   state:   $REPO/.local/kafka/{libs,data,server.properties,server.log,kafka.pid,cluster.id}
#   ports:   ${OUTBOX_KAFKA_PORT:-59092} (PLAINTEXT), ${OUTBOX_KAFKA_CONTROLLER_PORT:-59093}
# Writes OUTBOX_BROKERS and OUTBOX_KAFKA_PID_FILE to $REPO/.local/env.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

POM="$REPO/scripts/kafka/pom.xml"
DATA="$KAFKA_DIR/data"
CONF="$KAFKA_DIR/server.properties"
SERVER_LOG="$KAFKA_DIR/server.log"
CLUSTER_ID_FILE="$KAFKA_DIR/cluster.id"
MARKER="$KAFKA_LIBS/.complete"
READY_TIMEOUT=90

command -v java >/dev/null 2>&1 || die "java not found; run scripts/install-deps.sh"
mkdir -p "$KAFKA_DIR"

write_env() {
  env_set OUTBOX_BROKERS "$KAFKA_BOOTSTRAP"
  env_set OUTBOX_KAFKA_PID_FILE "$KAFKA_PID_FILE"
}

# Tool logging config first: kafka_tool (lib.sh) points at it.
cat >"$KAFKA_DIR/tools-log4j2.properties" <<'EOF'
# Written by scripts/kafka-up.sh: command-line tools log errors to stderr only.
status = error
appender.err.type = Console
appender.err.name = STDERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = ERROR
rootLogger.appenderRef.err.ref = STDERR
EOF

# Fast path: a live broker from an earlier run.
if pid="$(kafka_pid)"; then
  if port_open "$KAFKA_HOST" "$KAFKA_PORT"; then
    write_env
    printf '%s\n' "$KAFKA_BOOTSTRAP"
    exit 0
  fi
  log "broker pid $pid is running but $KAFKA_BOOTSTRAP is not open yet; waiting"
fi

# ---- jars -------------------------------------------------------------------------------
pom_sum="$(sha256sum "$POM" | cut -d' ' -f1)"
if [ ! -f "$MARKER" ] || [ "$(cat "$MARKER")" != "$pom_sum" ]; then
  command -v mvn >/dev/null 2>&1 || die "mvn not found; run scripts/install-deps.sh"
  log "downloading Kafka jars with Maven (scripts/kafka/pom.xml)"
  rm -rf "$KAFKA_LIBS" "$KAFKA_LIBS.tmp"
  mvn_log="$KAFKA_DIR/mvn.log"
  if ! mvn -q -B -f "$POM" dependency:copy-dependencies \
    -DoutputDirectory="$KAFKA_LIBS.tmp" -DincludeScope=runtime >"$mvn_log" 2>&1; then
    tail -n 40 "$mvn_log" >&2
    die "maven download failed (full log: $mvn_log)"
  fi
  mv "$KAFKA_LIBS.tmp" "$KAFKA_LIBS"
  printf '%s\n' "$pom_sum" >"$MARKER"
fi
kafka_jar="$(find "$KAFKA_LIBS" -maxdepth 1 -name 'kafka_2.13-*.jar' | head -n 1)"
[ -n "$kafka_jar" ] || die "no kafka_2.13 jar in $KAFKA_LIBS; delete it and re-run"

# ---- configuration (regenerated every run) ----------------------------------------------
cat >"$CONF" <<EOF
# Written by scripts/kafka-up.sh; overwritten on every run.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$DATA
num.partitions=3
default.replication.factor=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
EOF

cat >"$KAFKA_DIR/log4j2.properties" <<'EOF'
# Written by scripts/kafka-up.sh: the broker logs INFO to stdout, which kafka-up.sh
# redirects to .local/kafka/server.log.
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
logger.authorizer.name = kafka.authorizer.logger
logger.authorizer.level = WARN
EOF

cat >"$KAFKA_DIR/admin.properties" <<'EOF'
# Written by scripts/kafka-up.sh: short timeouts for the readiness probe.
request.timeout.ms=5000
default.api.timeout.ms=10000
EOF

# ---- storage (formatted once) -----------------------------------------------------------
if [ ! -f "$DATA/meta.properties" ]; then
  if [ ! -s "$CLUSTER_ID_FILE" ]; then
    kafka_tool kafka.tools.StorageTool random-uuid | tr -d '[:space:]' >"$CLUSTER_ID_FILE.tmp"
    [ -s "$CLUSTER_ID_FILE.tmp" ] || die "StorageTool random-uuid printed nothing"
    mv "$CLUSTER_ID_FILE.tmp" "$CLUSTER_ID_FILE"
  fi
  log "formatting $DATA (cluster id $(cat "$CLUSTER_ID_FILE"))"
  rm -rf "$DATA"
  if ! kafka_tool kafka.tools.StorageTool format -t "$(cat "$CLUSTER_ID_FILE")" -c "$CONF" \
    >"$KAFKA_DIR/format.log" 2>&1; then
    cat "$KAFKA_DIR/format.log" >&2
    die "kafka storage format failed"
  fi
fi

# ---- start ------------------------------------------------------------------------------
if ! pid="$(kafka_pid)"; then
  if port_open "$KAFKA_HOST" "$KAFKA_PORT" || port_open "$KAFKA_HOST" "$KAFKA_CONTROLLER_PORT"; then
    die "port $KAFKA_PORT or $KAFKA_CONTROLLER_PORT is already in use by another process"
  fi
  [ -f "$SERVER_LOG" ] && mv -f "$SERVER_LOG" "$SERVER_LOG.prev"
  log "starting Kafka $(basename "$kafka_jar" .jar | sed 's/^kafka_2.13-//') on $KAFKA_BOOTSTRAP (log: $SERVER_LOG)"
  (
    cd "$KAFKA_DIR"
    # setsid: own session, so a Ctrl-C or a test harness killing our process group
    # does not take the broker down with it.
    # Kafka's own start script's 1 GiB heap, touched up front (no page faults later), with ZGC:
    # under G1 this broker's young collections paused it for 100-500 ms every few seconds at
    # 5,000 events/s on 2 cores (gc.log: "Scan Heap Roots"), which stalled every producer's
    # acknowledgements; ZGC's pauses stay under a millisecond. GC log beside the server log.
    exec nohup setsid java -Xms1g -Xmx1g -XX:+AlwaysPreTouch -XX:+UseZGC \
      -Xlog:gc=info,safepoint=info:file="$KAFKA_DIR/gc.log":utctime,uptime:filecount=2,filesize=20m \
      -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" \
      -Dkafka.logs.dir="$KAFKA_DIR" \
      -cp "$KAFKA_LIBS/*" kafka.Kafka "$CONF" </dev/null >"$SERVER_LOG" 2>&1
  ) &
  pid=$!
  # setsid normally execs in place (same pid), but forks when it happens to be a process
  # group leader; then find the JVM by its command line (unique per checkout).
  for _ in $(seq 1 50); do
    if tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q 'kafka\.Kafka'; then
      break
    fi
    other="$(pgrep -f -n "kafka\.Kafka $CONF" || true)"
    if [ -n "$other" ]; then
      pid=$other
      break
    fi
    sleep 0.1
  done
  printf '%s\n' "$pid" >"$KAFKA_PID_FILE"
fi

# ---- wait until it answers a metadata request --------------------------------------------
start=$(now_ms)
deadline=$((start + READY_TIMEOUT * 1000))
ready=false
while (($(now_ms) < deadline)); do
  if ! kill -0 "$pid" 2>/dev/null; then
    log "the broker (pid $pid) exited; last lines of $SERVER_LOG:"
    tail -n 40 "$SERVER_LOG" >&2 || true
    rm -f "$KAFKA_PID_FILE"
    exit 1
  fi
  # Cheap checks first (each tool run is a JVM start), then a real metadata request.
  if port_open "$KAFKA_HOST" "$KAFKA_PORT" &&
    grep -q 'Kafka Server started' "$SERVER_LOG" 2>/dev/null &&
    KAFKA_TOOL_TIMEOUT=30 kafka_tool org.apache.kafka.tools.TopicCommand \
      --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$KAFKA_DIR/admin.properties" \
      --list >/dev/null 2>&1; then
    ready=true
    break
  fi
  sleep 0.25
done
if ! $ready; then
  log "broker not ready after ${READY_TIMEOUT}s; last lines of $SERVER_LOG:"
  tail -n 40 "$SERVER_LOG" >&2 || true
  exit 1
fi
log "Kafka ready in $(($(now_ms) - start)) ms"

write_env
printf '%s\n' "$KAFKA_BOOTSTRAP"
