#!/usr/bin/env python3
"""aws_admin.py: queues and buses of the local moto (scripts/aws-up.sh), for the demo and the bench.

An independent client (boto3, which comes with moto in .local/aws/venv): what it reads back is
SQS's view, not the relay's. Run it with that venv's python; the endpoint, region and key come
from the environment scripts/aws-up.sh writes to .local/env (OUTBOX_AWS_ENDPOINT,
OUTBOX_AWS_REGION, OUTBOX_AWS_ACCESS_KEY_ID, OUTBOX_AWS_SECRET_ACCESS_KEY).

  aws_admin.py create-queue NAME [--fifo]     prints the queue's URL
  aws_admin.py count URL                      prints the messages the queue holds
  aws_admin.py wait-count URL N [--timeout-s S] [--times]
                                              waits until the queue holds N messages (polled every
                                              0.2 s); prints the seconds waited, or with --times
                                              the wall-clock nanoseconds when it was first seen
                                              holding a message and holding N (exit 1 after S,
                                              default 60)
  aws_admin.py read URL N [--timeout-s S]     receives (and deletes) N messages, printing each in
                                              the order SQS hands them out, then a line
                                              'per group: GROUP: TYPE TYPE...; ...' (the type
                                              attributes of each message group, in that order);
                                              exit 1 when fewer came
  aws_admin.py delete-queue URL
  aws_admin.py create-bus NAME                prints the bus's ARN (a bus with no rule)
  aws_admin.py delete-bus NAME
"""
import argparse
import os
import sys
import time

import boto3


def client(service):
    try:
        return boto3.client(service, endpoint_url=os.environ["OUTBOX_AWS_ENDPOINT"],
                            region_name=os.environ["OUTBOX_AWS_REGION"],
                            aws_access_key_id=os.environ["OUTBOX_AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=os.environ["OUTBOX_AWS_SECRET_ACCESS_KEY"])
    except KeyError as e:
        sys.exit(f"aws_admin.py: {e.args[0]} is not set (source .local/env after scripts/aws-up.sh)")


def count(sqs, url):
    a = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    return int(a["Attributes"]["ApproximateNumberOfMessages"])


def show(m):
    sysattr = m.get("Attributes", {})
    attrs = m.get("MessageAttributes", {})
    lines = [f"  group={sysattr.get('MessageGroupId', '-')} "
             f"deduplication={sysattr.get('MessageDeduplicationId', '-')}"]
    lines.append("    attributes: " + ", ".join(
        f"{k}={v.get('StringValue', v.get('BinaryValue'))}" for k, v in attrs.items()))
    lines.append(f"    body:       {m['Body']}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("create-queue")
    p.add_argument("name")
    p.add_argument("--fifo", action="store_true")
    sub.add_parser("count").add_argument("url")
    for name in ("wait-count", "read"):
        p = sub.add_parser(name)
        p.add_argument("url")
        p.add_argument("n", type=int)
        p.add_argument("--timeout-s", type=float, default=60)
        if name == "wait-count":
            p.add_argument("--times", action="store_true")
    sub.add_parser("delete-queue").add_argument("url")
    sub.add_parser("create-bus").add_argument("name")
    sub.add_parser("delete-bus").add_argument("name")
    a = ap.parse_args()

    if a.command == "create-bus":
        print(client("events").create_event_bus(Name=a.name)["EventBusArn"])
        return 0
    if a.command == "delete-bus":
        client("events").delete_event_bus(Name=a.name)
        return 0
    sqs = client("sqs")
    if a.command == "create-queue":
        attributes = {"FifoQueue": "true"} if a.fifo else {}
        print(sqs.create_queue(QueueName=a.name, Attributes=attributes)["QueueUrl"])
    elif a.command == "count":
        print(count(sqs, a.url))
    elif a.command == "delete-queue":
        sqs.delete_queue(QueueUrl=a.url)
    elif a.command == "wait-count":
        t0 = time.monotonic()
        first = None
        while True:
            n = count(sqs, a.url)
            if n > 0 and first is None:
                first = time.time_ns()
            if n >= a.n:
                print(f"{first} {time.time_ns()}" if a.times else f"{time.monotonic() - t0:.3f}")
                return 0
            if time.monotonic() - t0 > a.timeout_s:
                sys.exit(f"aws_admin.py: {n} of {a.n} messages in {a.url} after {a.timeout_s:g} s")
            time.sleep(0.2)
    elif a.command == "read":
        # A FIFO queue hands out a group's next message only once the previous one is deleted:
        # receive, print, delete, until N came.
        deadline = time.monotonic() + a.timeout_s
        got = 0
        groups = {}  # group -> the type attributes in the order received
        while got < a.n:
            if time.monotonic() > deadline:
                sys.exit(f"aws_admin.py: {got} of {a.n} messages read from {a.url} "
                         f"in {a.timeout_s:g} s")
            r = sqs.receive_message(QueueUrl=a.url, MaxNumberOfMessages=10, WaitTimeSeconds=1,
                                    VisibilityTimeout=60, AttributeNames=["All"],
                                    MessageAttributeNames=["All"])
            messages = r.get("Messages", [])
            for m in messages:
                print(show(m))
                got += 1
                group = m.get("Attributes", {}).get("MessageGroupId", "-")
                kind = m.get("MessageAttributes", {}).get("type", {}).get("StringValue", "-")
                groups.setdefault(group, []).append(kind)
            if messages:
                sqs.delete_message_batch(QueueUrl=a.url, Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)])
        print("per group: " + "; ".join(f"{g}: {' '.join(t)}" for g, t in sorted(groups.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
