#!/usr/bin/env bash
# Starts a real single-node Apache Kafka broker (KRaft, combined broker+controller) from the
# jars listed in scripts/kafka/pom.xml and prints its bootstrap address on stdout.
# Already running: just prints the bootstrap address.
#   state:   $LOCAL_DIR/kafka/{data,server.properties,server.log,kafka.pid,cluster.id} (lib.sh:
#            $REPO/.local unless OUTBOX_STATE_DIR names another); the jars in $REPO/.local/kafka/libs
#   ports:   ${OUTBOX_KAFKA_PORT:-29092} (PLAINTEXT), ${OUTBOX_KAFKA_CONTROLLER_PORT:-29093},
#            ${OUTBOX_KAFKA_SASL_PORT:-29094} (SASL_SSL: SCRAM-SHA-512 and PLAIN over TLS),
#            ${OUTBOX_KAFKA_MTLS_PORT:-29095} (SSL with a required client certificate)
#   TLS:     $REPO/.local/kafka/tls: a self-signed CA, the broker's certificate (127.0.0.1,
#            localhost) and a client certificate for the relay's principal, made once by openssl
#   ACLs:    StandardAuthorizer. Super users: User:ANONYMOUS (the PLAINTEXT and CONTROLLER
#            listeners, so every test on PLAINTEXT works as before) and User:admin. The relay's
#            principal User:outbox-relay (SASL user, or the client certificate's CN) may create,
#            write and describe topics whose names start with outbox.event. or outbox.dlq; for
#            --delivery exactly-once, use transactional.ids and read and write topics starting
#            with outbox-relay. (the checkpoints); nothing else.
# Writes OUTBOX_BROKERS, OUTBOX_KAFKA_PID_FILE and the secured listeners' addresses, CA, client
# certificate and credentials (OUTBOX_KAFKA_SASL_*, OUTBOX_KAFKA_MTLS_*, OUTBOX_KAFKA_CA) to
# $REPO/.local/env.
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
command -v kcat >/dev/null 2>&1 || die "kcat not found; run scripts/install-deps.sh (package kafkacat)"
mkdir -p "$KAFKA_DIR"

write_env() {
  env_set OUTBOX_BROKERS "$KAFKA_BOOTSTRAP"
  env_set OUTBOX_KAFKA_PID_FILE "$KAFKA_PID_FILE"
  env_set OUTBOX_KAFKA_SASL_BROKERS "$KAFKA_HOST:$KAFKA_SASL_PORT"
  env_set OUTBOX_KAFKA_MTLS_BROKERS "$KAFKA_HOST:$KAFKA_MTLS_PORT"
  env_set OUTBOX_KAFKA_CA "$TLS_DIR/ca.pem"
  env_set OUTBOX_KAFKA_CLIENT_CERT "$TLS_DIR/relay.pem"
  env_set OUTBOX_KAFKA_CLIENT_KEY "$TLS_DIR/relay.key"
  env_set OUTBOX_KAFKA_SASL_USER "$RELAY_USER"
  env_set OUTBOX_KAFKA_SASL_PASSWORD "$(secret relay)"
  env_set OUTBOX_KAFKA_ADMIN_USER admin
  env_set OUTBOX_KAFKA_ADMIN_PASSWORD "$(secret admin)"
}

# ---- TLS material and credentials (made once, kept across restarts) --------------------
TLS_DIR="$KAFKA_DIR/tls"
SECRETS_DIR="$KAFKA_DIR/secrets"
RELAY_USER=outbox-relay
# secret NAME: the password of user NAME, made once (random, 24 hex digits).
secret() { cat "$SECRETS_DIR/$1"; }
make_security_material() {
  mkdir -p "$TLS_DIR" "$SECRETS_DIR"
  chmod 700 "$SECRETS_DIR"
  local user
  for user in relay admin; do
    if [ ! -s "$SECRETS_DIR/$user" ]; then
      (umask 077 && openssl rand -hex 12 >"$SECRETS_DIR/$user.tmp")
      mv "$SECRETS_DIR/$user.tmp" "$SECRETS_DIR/$user"
    fi
  done
  [ -s "$TLS_DIR/relay.pem" ] && return 0
  command -v openssl >/dev/null 2>&1 || die "openssl not found; run scripts/install-deps.sh"
  log "making a test CA, the broker's and the relay's certificates in $TLS_DIR"
  local t="$TLS_DIR/tmp"
  rm -rf "$t" && mkdir -p "$t"
  # EC P-256 keys: made in milliseconds; Java 17 and librdkafka (OpenSSL 3) both take them.
  openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -days 3650 \
    -subj "/CN=outbox-relay test CA" -keyout "$t/ca.key" -out "$t/ca.pem" 2>/dev/null
  # cert NAME CN EXTENSIONS: a key (PKCS#8, as Kafka's PEM key store wants it) and a
  # certificate signed by the CA.
  cert() {
    openssl req -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:P-256 -subj "/CN=$2" \
      -keyout "$t/$1.key" -out "$t/$1.csr" 2>/dev/null
    printf '%s\n' "$3" >"$t/$1.ext"
    openssl x509 -req -in "$t/$1.csr" -CA "$t/ca.pem" -CAkey "$t/ca.key" -CAcreateserial \
      -days 3650 -extfile "$t/$1.ext" -out "$t/$1.pem" 2>/dev/null
  }
  cert broker localhost "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth"
  cert relay "$RELAY_USER" "extendedKeyUsage=clientAuth"
  # The broker's key store: key and certificate chain in one PEM file.
  cat "$t/broker.key" "$t/broker.pem" "$t/ca.pem" >"$t/broker-keystore.pem"
  chmod 600 "$t"/*.key "$t/broker-keystore.pem"
  mv "$t"/{ca.pem,ca.key,broker-keystore.pem,relay.pem,relay.key} "$TLS_DIR/"
  rm -rf "$t"
}
make_security_material

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

# ---- SCRAM users and ACLs: once per data directory (they live in the metadata log) -------
# provision: run on a broker that answers. The marker holds a hash of what was provisioned; a
# change (new password, new rule) runs it again. Each tool run is a JVM start (~2 s), so a
# provisioned data directory skips them; a failed run is retried by the next kafka-up.sh.
# provision_tool WHAT CLASS ARGS...: a Kafka tool of the provisioning; on failure, what it said
# (AclCommand prints its error on stdout) and WHAT, then the script ends.
provision_tool() {
  local what=$1 out rc=0
  shift
  out="$(KAFKA_TOOL_TIMEOUT=$PROVISION_TIMEOUT kafka_tool "$@" 2>&1)" || rc=$?
  [ $rc -eq 0 ] && return 0
  printf '%s\n' "$out" | tail -n 20 >&2
  die "$what (exit $rc)"
}

provision() {
  local provision_spec provision_sum user name
  provision_spec="users=$RELAY_USER,admin $(secret relay) $(secret admin) acl=v2"
  provision_sum="$(printf '%s' "$provision_spec" | sha256sum | cut -d' ' -f1)"
  local marker="$DATA/.outbox-provisioned"
  [ "$(cat "$marker" 2>/dev/null)" = "$provision_sum" ] && return 0
  log "provisioning SCRAM users and ACLs"
  # Each tool is a JVM of its own and its admin call may wait on a broker still warming up,
  # when the lanes' brokers all start at once on 2 cores: generous, still bounded.
  PROVISION_TIMEOUT=${OUTBOX_KAFKA_TOOL_TIMEOUT:-180}
  if [ ! -f "$DATA/.outbox-scram-at-format" ]; then
    for user in "$RELAY_USER" admin; do
      name=relay
      [ "$user" = admin ] && name="admin"
      provision_tool "could not add the SCRAM credentials of $user" kafka.admin.ConfigCommand \
        --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$KAFKA_DIR/admin.properties" \
        --alter --entity-type users --entity-name "$user" \
        --add-config "SCRAM-SHA-512=[password=$(secret "$name")]"
    done
  fi
  # The relay's principal: its topics (outbox.event.*, outbox.dlq*) and nothing else. Create:
  # topics are auto-created on first use. Write implies Describe (metadata) and, since Kafka
  # 2.8, the idempotent producer's IdempotentWrite.
  provision_tool "could not add the ACLs of User:$RELAY_USER" org.apache.kafka.tools.AclCommand \
    --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$KAFKA_DIR/admin.properties" \
    --add --allow-principal "User:$RELAY_USER" --operation Write --operation Create \
    --operation Describe --resource-pattern-type prefixed \
    --topic outbox.event. --topic outbox.dlq
  # --delivery exactly-once: its transactional.id (outbox-relay.SLOT) and its checkpoint topic
  # (outbox-relay.checkpoints, read back at start with a group id the reader never joins).
  provision_tool "could not add the transactional.id ACLs of User:$RELAY_USER" org.apache.kafka.tools.AclCommand \
    --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$KAFKA_DIR/admin.properties" \
    --add --allow-principal "User:$RELAY_USER" --operation Write --operation Describe \
    --resource-pattern-type prefixed --transactional-id outbox-relay.
  provision_tool "could not add the checkpoint topic ACLs of User:$RELAY_USER" org.apache.kafka.tools.AclCommand \
    --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$KAFKA_DIR/admin.properties" \
    --add --allow-principal "User:$RELAY_USER" --operation Read --operation Write \
    --operation Create --operation Describe --resource-pattern-type prefixed \
    --topic outbox-relay.
  provision_tool "could not add the group ACLs of User:$RELAY_USER" org.apache.kafka.tools.AclCommand \
    --bootstrap-server "$KAFKA_BOOTSTRAP" --command-config "$KAFKA_DIR/admin.properties" \
    --add --allow-principal "User:$RELAY_USER" --operation Read --operation Describe \
    --resource-pattern-type prefixed --group outbox-relay
  printf '%s\n' "$provision_sum" >"$marker"
}

# Fast path: a live broker from an earlier run.
if pid="$(kafka_pid)"; then
  if port_open "$KAFKA_HOST" "$KAFKA_PORT"; then
    provision
    write_env
    printf '%s\n' "$KAFKA_BOOTSTRAP"
    exit 0
  fi
  log "broker pid $pid is running but $KAFKA_BOOTSTRAP is not open yet; waiting"
fi

# ---- jars -------------------------------------------------------------------------------
# Shared by every state folder (lib.sh): downloaded once, under a lock when lanes start at once.
pom_sum="$(sha256sum "$POM" | cut -d' ' -f1)"
download_jars() {
  [ ! -f "$MARKER" ] || [ "$(cat "$MARKER")" != "$pom_sum" ] || return 0
  command -v mvn >/dev/null 2>&1 || die "mvn not found; run scripts/install-deps.sh"
  log "downloading Kafka jars with Maven (scripts/kafka/pom.xml)"
  rm -rf "$KAFKA_LIBS" "$KAFKA_LIBS.tmp"
  mkdir -p "$(dirname "$KAFKA_LIBS")"
  mvn_log="$(dirname "$KAFKA_LIBS")/mvn.log"
  if ! mvn -q -B -f "$POM" dependency:copy-dependencies \
    -DoutputDirectory="$KAFKA_LIBS.tmp" -DincludeScope=runtime >"$mvn_log" 2>&1; then
    tail -n 40 "$mvn_log" >&2
    die "maven download failed (full log: $mvn_log)"
  fi
  mv "$KAFKA_LIBS.tmp" "$KAFKA_LIBS"
  printf '%s\n' "$pom_sum" >"$MARKER"
}
with_lock kafka-jars download_jars || exit 1
kafka_jar="$(find "$KAFKA_LIBS" -maxdepth 1 -name 'kafka_2.13-*.jar' | head -n 1)"
[ -n "$kafka_jar" ] || die "no kafka_2.13 jar in $KAFKA_LIBS; delete it and re-run"

# ---- configuration (regenerated every run) ----------------------------------------------
cat >"$CONF" <<EOF
# Written by scripts/kafka-up.sh; overwritten on every run.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$KAFKA_HOST:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,CONTROLLER://$KAFKA_HOST:$KAFKA_CONTROLLER_PORT,SASL_SSL://$KAFKA_HOST:$KAFKA_SASL_PORT,SSL://$KAFKA_HOST:$KAFKA_MTLS_PORT
advertised.listeners=PLAINTEXT://$KAFKA_HOST:$KAFKA_PORT,SASL_SSL://$KAFKA_HOST:$KAFKA_SASL_PORT,SSL://$KAFKA_HOST:$KAFKA_MTLS_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL
# TLS on SASL_SSL and SSL: the broker's certificate from the test CA; SSL requires a client
# certificate from the same CA, whose CN becomes the principal (User:outbox-relay).
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
listener.name.ssl.ssl.client.auth=required
ssl.principal.mapping.rules=RULE:^CN=([^,]+)\$/\$1/,DEFAULT
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="$(secret admin)" user_$RELAY_USER="$(secret relay)";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
# ACLs (made by this script, kept in the metadata log). ANONYMOUS is every PLAINTEXT and
# CONTROLLER client, the broker itself included.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS;User:admin
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
# Written by scripts/kafka-up.sh: the admin client of the provisioning tools (SCRAM users,
# ACLs). Readiness is kcat's; a freshly started broker on a loaded machine may take longer than
# 10 s to commit an ACL to its metadata log.
request.timeout.ms=30000
default.api.timeout.ms=120000
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
  # SCRAM credentials go into the metadata log with the format, for free; provision() below
  # adds them to storage formatted before they existed.
  if ! kafka_tool kafka.tools.StorageTool format -t "$(cat "$CLUSTER_ID_FILE")" -c "$CONF" \
    --add-scram "SCRAM-SHA-512=[name=$RELAY_USER,password=$(secret relay)]" \
    --add-scram "SCRAM-SHA-512=[name=admin,password=$(secret admin)]" \
    >"$KAFKA_DIR/format.log" 2>&1; then
    cat "$KAFKA_DIR/format.log" >&2
    die "kafka storage format failed"
  fi
  touch "$DATA/.outbox-scram-at-format"
fi

# ---- start ------------------------------------------------------------------------------
if ! pid="$(kafka_pid)"; then
  for port in "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_SASL_PORT" "$KAFKA_MTLS_PORT"; do
    if port_open "$KAFKA_HOST" "$port"; then
      die "port $port is already in use by another process"
    fi
  done
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
  # Cheap checks first, then a real metadata request that names this broker (kcat: a JVM tool
  # start would cost seconds of CPU on every restart of a fault test).
  if port_open "$KAFKA_HOST" "$KAFKA_PORT" &&
    grep -q 'Kafka Server started' "$SERVER_LOG" 2>/dev/null &&
    timeout -k 2 15 kcat -b "$KAFKA_BOOTSTRAP" -L -m 10 2>/dev/null | grep -q "1 brokers:"; then
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
provision


write_env
printf '%s\n' "$KAFKA_BOOTSTRAP"
