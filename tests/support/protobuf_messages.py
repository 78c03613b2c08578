"""Protobuf message classes built at run time for the tests (no protoc here), and Confluent's
own ``ProtobufSerializer`` writing them through a registry.

``order_class(version)`` is ``shop.Order`` in three writer versions, each in a pool of its own
(they share full names, as two versions of one schema do):

* 1: ``id``, ``ts`` (google.protobuf.Timestamp), ``customer`` {``id`` int64, ``tier`` enum},
  ``amount`` (confluent.type.Decimal), ``optional string note``;
* 2: ``amount`` is a google.type.Decimal (decimal text), a new ``optional string coupon``;
* 3: ``customer`` lost ``tier``;
* 4: version 2 with a new ``string channel``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any

from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message_factory import GetMessageClass

from eos.compute.formats.protobuf import builtin_files
from eos.tools.servers.schema_registry import SchemaRegistryServer

with warnings.catch_warnings():  # authlib (imported by the client) warns on import
    import authlib.deprecate  # noqa: F401  its import adds an "always" filter: then ours
    warnings.simplefilter("ignore")
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

F = descriptor_pb2.FieldDescriptorProto
TIMESTAMP, DECIMAL, TEXT_DECIMAL = (".google.protobuf.Timestamp", ".confluent.type.Decimal",
                                    ".google.type.Decimal")


def field(message: Any, name: str, number: int, kind: int, type_name: str = "",
          repeated: bool = False, optional: bool = False) -> None:
    """Add a field (``optional``: proto3 explicit presence, with its synthetic oneof)."""
    f = message.field.add(name=name, number=number, type=kind,
                          label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL)
    if type_name:
        f.type_name = type_name
    if optional:
        f.proto3_optional = True
        f.oneof_index = len(message.oneof_decl)
        message.oneof_decl.add(name=f"_{name}")


def build(file: descriptor_pb2.FileDescriptorProto) -> DescriptorPool:
    pool = DescriptorPool()
    for builtin in builtin_files():
        pool.AddSerializedFile(builtin)
    pool.Add(file)
    return pool


def new_file(name: str = "shop/order.proto") -> descriptor_pb2.FileDescriptorProto:
    return descriptor_pb2.FileDescriptorProto(
        name=name, package="shop", syntax="proto3",
        dependency=["google/protobuf/timestamp.proto", "confluent/types/decimal.proto",
                    "google/type/decimal.proto", "google/type/date.proto",
                    "google/protobuf/wrappers.proto"])


@cache
def order_class(version: int) -> Any:
    file = new_file()
    order = file.message_type.add(name="Order")
    field(order, "id", 1, F.TYPE_STRING)
    field(order, "ts", 2, F.TYPE_MESSAGE, TIMESTAMP)
    field(order, "customer", 3, F.TYPE_MESSAGE, ".shop.Order.Customer")
    customer = order.nested_type.add(name="Customer")
    field(customer, "id", 1, F.TYPE_INT64)
    if version != 3:
        field(customer, "tier", 2, F.TYPE_ENUM, ".shop.Order.Tier")
    tier = order.enum_type.add(name="Tier")
    tier.value.add(name="BASIC", number=0)
    tier.value.add(name="GOLD", number=1)
    text = version in (2, 4)
    field(order, "amount", 4, F.TYPE_MESSAGE, TEXT_DECIMAL if text else DECIMAL)
    field(order, "note", 5, F.TYPE_STRING, optional=True)
    if text:
        field(order, "coupon", 6, F.TYPE_STRING, optional=True)
    if version == 4:
        field(order, "channel", 7, F.TYPE_STRING)
    return GetMessageClass(build(file).FindMessageTypeByName("shop.Order"))


def order(version: int, oid: str, ts: datetime, customer: int, tier: str | None,
          amount: Decimal, note: str | None = None, coupon: str | None = None) -> Any:
    """A ``shop.Order`` of the version (amount at scale 2 in versions 1 and 3, text in 2, 4)."""
    message = order_class(version)()
    message.id = oid
    message.ts.FromDatetime(ts)
    message.customer.id = customer
    if tier is not None:
        message.customer.tier = message.DESCRIPTOR.enum_types_by_name["Tier"].values_by_name[
            tier].number
    if version in (2, 4):
        message.amount.value = str(amount)
    else:
        unscaled = int(amount.scaleb(2))
        message.amount.value = unscaled.to_bytes(8, "big", signed=True)
        message.amount.scale = 2
        message.amount.precision = 12
    if note is not None:
        message.note = note
    if coupon is not None:
        message.coupon = coupon
    return message


def serializer(registry: SchemaRegistryServer, message_class: Any) -> Callable[[str, Any], bytes]:
    """Confluent's ``ProtobufSerializer`` for the class, registering under topic-value."""
    client = SchemaRegistryClient({"url": registry.url,
                                   "basic.auth.user.info": registry.user_info})
    ser = ProtobufSerializer(message_class, client, {"use.deprecated.format": False})

    def write(topic: str, message: Any) -> bytes:
        data = ser(message, SerializationContext(topic, MessageField.VALUE))
        assert data is not None
        return data

    return write
