#!/usr/bin/env bash
# Starts moto's server (PyPI's moto[server], pinned) as a local stand-in for SQS and EventBridge,
# with AWS's request authentication on: every request must carry a valid Signature Version 4 of
# an access key moto's IAM knows (INITIAL_NO_AUTH_ACTION_COUNT=0). On a fresh start it makes the
# test user outbox-relay-N (allowed everything) and its access key, through the one window of
# unauthenticated actions moto's /moto-api/reset-auth opens, then checks that a request signed
# with the key passes and one signed with a wrong secret is refused. Prints the endpoint URL on
# stdout. Already running: just prints it.
#   venv:    $REPO/.local/aws/venv (moto[server]==$MOTO_VERSION, Debian's python3 -m venv; shared
#            by every state folder)
#   state:   $LOCAL_DIR/aws/{moto_server.log,moto_server.pid} (moto keeps everything in memory:
#            a restart forgets the queues and the key)
#   port:    ${OUTBOX_AWS_PORT:-24566} (127.0.0.1 only, plain HTTP)
# Writes OUTBOX_AWS_ENDPOINT, OUTBOX_AWS_REGION, OUTBOX_AWS_ACCESS_KEY_ID,
# OUTBOX_AWS_SECRET_ACCESS_KEY (a key of the local moto only) and OUTBOX_AWS_PID_FILE to
# $LOCAL_DIR/env.
set -euo pipefail
# shellcheck source=scripts/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

MOTO_VERSION=5.2.5
VENV="$SHARED_DIR/aws/venv"
PYTHON="$VENV/bin/python"
AWS_DIR="$LOCAL_DIR/aws"
AWS_HOST=127.0.0.1
AWS_PORT="${OUTBOX_AWS_PORT:-24566}"
AWS_ENDPOINT="http://$AWS_HOST:$AWS_PORT"
AWS_REGION=us-east-1
PID_FILE="$AWS_DIR/moto_server.pid"
SERVER_LOG="$AWS_DIR/moto_server.log"
READY_TIMEOUT=30
check_port_outside_ephemeral OUTBOX_AWS_PORT "$AWS_PORT"

# moto_pid: the server's pid when the pid file names a live moto_server (also a stopped one).
moto_pid() {
  local pid
  [ -f "$PID_FILE" ] || return 1
  pid="$(cat "$PID_FILE" 2>/dev/null)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/cmdline" ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q 'moto_server' || return 1
  printf '%s\n' "$pid"
}

make_venv() {
  if [ -x "$PYTHON" ] && "$PYTHON" -c "import importlib.metadata as m; \
raise SystemExit(m.version('moto') != '$MOTO_VERSION')" 2>/dev/null; then
    return 0
  fi
  rm -rf "$VENV"
  log "creating $VENV with moto[server]==$MOTO_VERSION"
  mkdir -p "$(dirname "$VENV")"
  /usr/bin/python3 -m venv "$VENV" || die "python3 -m venv failed (is python3-venv installed?)"
  local pip_log
  pip_log="$(mktemp)"
  if ! "$PYTHON" -m pip install --disable-pip-version-check -q "moto[server]==$MOTO_VERSION" \
    >"$pip_log" 2>&1; then
    tail -n 20 "$pip_log" >&2
    rm -f "$pip_log"
    die "pip install moto[server]==$MOTO_VERSION failed"
  fi
  rm -f "$pip_log"
}

ready() { port_open "$AWS_HOST" "$AWS_PORT"; }

# Fast path: a live server from an earlier run (its key is in the env file already).
if moto_pid >/dev/null && ready && grep -q '^export OUTBOX_AWS_ACCESS_KEY_ID=' "$ENV_FILE" 2>/dev/null; then
  printf '%s\n' "$AWS_ENDPOINT"
  exit 0
fi

with_lock aws-venv make_venv
mkdir -p "$AWS_DIR"

if ! pid="$(moto_pid)"; then
  port_open "$AWS_HOST" "$AWS_PORT" && die "port $AWS_PORT is already in use by another process"
  [ -f "$SERVER_LOG" ] && mv -f "$SERVER_LOG" "$SERVER_LOG.prev"
  log "starting moto_server $MOTO_VERSION on $AWS_ENDPOINT (log: $SERVER_LOG)"
  # setsid: own session, so a Ctrl-C or a test harness killing our process group does not take
  # the server down with it. No request goes unauthenticated from the start.
  INITIAL_NO_AUTH_ACTION_COUNT=0 nohup setsid "$VENV/bin/moto_server" -H "$AWS_HOST" \
    -p "$AWS_PORT" </dev/null >"$SERVER_LOG" 2>&1 &
  pid=$!
  printf '%s\n' "$pid" >"$PID_FILE"
fi

start=$(now_ms)
if ! wait_until "$READY_TIMEOUT" "moto_server on $AWS_ENDPOINT" ready; then
  tail -n 30 "$SERVER_LOG" >&2 || true
  die "moto_server (pid $pid) not ready after ${READY_TIMEOUT}s"
fi
log "moto_server ready in $(($(now_ms) - start)) ms"

# The test user and its key, then the check that authentication is on. boto3 comes with moto.
keys="$(
  "$PYTHON" - "$AWS_ENDPOINT" "$AWS_REGION" <<'PY'
import json, sys, time, urllib.request
import boto3, botocore.exceptions

endpoint, region = sys.argv[1], sys.argv[2]

def client(service, key_id, secret):
    return boto3.client(service, endpoint_url=endpoint, region_name=region,
                        aws_access_key_id=key_id, aws_secret_access_key=secret)

# Exactly three actions go unauthenticated: the user, its policy, its key.
urllib.request.urlopen(urllib.request.Request(
    endpoint + "/moto-api/reset-auth", data=b"3", method="POST",
    headers={"Content-Type": "text/plain"}), timeout=10).read()
# A new name each time: a server whose key was lost from the env file still has the old user.
user = "outbox-relay-%d" % time.time_ns()
iam = client("iam", "AKIDBOOTSTRAP", "bootstrap")
iam.create_user(UserName=user)
iam.put_user_policy(UserName=user, PolicyName="everything", PolicyDocument=json.dumps(
    {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}))
key = iam.create_access_key(UserName=user)["AccessKey"]

client("sqs", key["AccessKeyId"], key["SecretAccessKey"]).list_queues()
try:
    client("sqs", key["AccessKeyId"], key["SecretAccessKey"] + "x").list_queues()
    sys.exit("moto accepted a request signed with a wrong secret: authentication is off")
except botocore.exceptions.ClientError as e:
    # moto answers SQS's JSON protocol with an XML error here: boto3 leaves it in the message.
    error = e.response["Error"]
    if "SignatureDoesNotMatch" not in (error.get("Code", "") + error.get("Message", "")):
        sys.exit("a wrong secret was refused, but not with SignatureDoesNotMatch: %s" % error)
print(key["AccessKeyId"], key["SecretAccessKey"])
PY
)" || die "making the test user's key in moto failed (log: $SERVER_LOG)"
read -r key_id secret <<<"$keys"

env_set OUTBOX_AWS_ENDPOINT "$AWS_ENDPOINT"
env_set OUTBOX_AWS_REGION "$AWS_REGION"
env_set OUTBOX_AWS_ACCESS_KEY_ID "$key_id"
env_set OUTBOX_AWS_SECRET_ACCESS_KEY "$secret"
env_set OUTBOX_AWS_PID_FILE "$PID_FILE"
log "authentication on: a request signed with the test key passes, a wrong secret is refused"
printf '%s\n' "$AWS_ENDPOINT"
