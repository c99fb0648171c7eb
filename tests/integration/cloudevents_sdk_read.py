#!/usr/bin/env python3
"""Reads Kafka records as a consumer with the CloudEvents SDK would (PyPI's cloudevents).

Input (the file named by argv[1]): one record per line, tab-separated hex fields:
    key, value, then name=value header pairs ('-' for a null key or value, 'name=-' for a header
    without value). Output: one JSON object per record, in the same order: the attributes the SDK
    read ("ok": true), or the SDK's error ("ok": false). Each record is parsed twice, with the
    SDK's current binding (cloudevents.core.bindings.kafka, which validates the attributes) and
    with its v1 binding (cloudevents.v1.kafka.from_binary); both must accept it and agree.
"""
import json
import sys

from cloudevents.core.bindings import kafka as core_kafka
from cloudevents.core.formats.json import JSONFormat
from cloudevents.v1 import kafka as v1_kafka


def unhex(field):
    return None if field == "-" else bytes.fromhex(field)


def describe_data(data):
    if data is None:
        return None
    if isinstance(data, (bytes, bytearray)):
        return {"bytes": bytes(data).hex()}
    if isinstance(data, str):
        return {"text": data}
    return {"json": data}


def read(line):
    fields = line.rstrip("\n").split("\t")
    key, value = unhex(fields[0]), unhex(fields[1])
    headers = {}
    for pair in fields[2:]:
        name, _, hexed = pair.partition("=")
        name = bytes.fromhex(name).decode("utf-8")
        # Kafka headers without value: the SDK's KafkaMessage takes bytes only.
        headers[name] = b"" if hexed == "-" else bytes.fromhex(hexed)
    message = core_kafka.KafkaMessage(headers=headers, key=key, value=value or b"")
    event = core_kafka.from_binary(message, JSONFormat())
    legacy = v1_kafka.from_binary(
        v1_kafka.KafkaMessage(headers=headers, key=key, value=value or b""),
        data_unmarshaller=lambda body: body,
    )
    attributes = event.get_attributes()
    for name in ("id", "source", "type", "specversion", "subject", "datacontenttype"):
        if legacy.get(name) != attributes.get(name):
            raise ValueError(f"the v1 binding reads {name}={legacy.get(name)!r}, "
                             f"the current one {attributes.get(name)!r}")
    out = {"ok": True}
    for name, attr in attributes.items():
        out[name] = attr.isoformat() if name == "time" else attr
    if isinstance(out.get("partitionkey"), bytes):
        out["partitionkey"] = out["partitionkey"].decode("utf-8")
    out["data"] = describe_data(event.get_data())
    out["legacy_time"] = legacy.get("time")
    return out


def main():
    with open(sys.argv[1], encoding="ascii") as lines:
        for line in lines:
            try:
                out = read(line)
            except Exception as error:  # the SDK's refusal is the test's finding
                out = {"ok": False, "error": f"{type(error).__name__}: {error}"}
            print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
