"""Reads TensorBoard event files as TensorBoard reads them, independently of dit_mp's writer.

The framing is checked record by record (length, masked CRC-32C of the length, data, masked CRC-32C of
the data, both CRCs computed here), and each record is parsed by Google's protobuf runtime (Debian's
python3-protobuf) against TensorBoard's schema for the fields dit_mp writes (event.proto, summary.proto,
tensor.proto, tensor_shape.proto: Event, Summary, Summary.Value, Summary.Image, SummaryMetadata,
SessionLog, TensorProto; field numbers and types as TensorBoard declares them), built here as
descriptors. Files are taken in the order of their first event's wall time, and a SessionLog START at
step s drops what earlier files hold at step s and after, as TensorBoard's purge of orphaned data does.

  load(logdir) -> [(step, tag, kind, value)]: kind "scalar" (float), "image" (height, width,
  colorspace, png bytes), "text" (str); plus "file_version" and "session_log" entries.
"""

import glob
import os
import struct

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def _schema():
    fd = descriptor_pb2.FileDescriptorProto(name="tb_subset.proto", package="tb", syntax="proto3")

    def message(name, fields, parent=None):
        m = (parent.nested_type if parent else fd.message_type).add(name=name)
        for fname, number, ftype, label, type_name in fields:
            f = m.field.add(name=fname, number=number, type=ftype, label=label)
            if type_name:
                f.type_name = type_name
        return m

    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    message("TensorShapeProto", [])
    message("TensorProto", [("dtype", 1, F.TYPE_INT32, opt, None),
                            ("tensor_shape", 2, F.TYPE_MESSAGE, opt, ".tb.TensorShapeProto"),
                            ("string_val", 8, F.TYPE_BYTES, rep, None)])
    meta = message("SummaryMetadata", [("plugin_data", 1, F.TYPE_MESSAGE, opt, ".tb.SummaryMetadata.PluginData")])
    message("PluginData", [("plugin_name", 1, F.TYPE_STRING, opt, None),
                           ("content", 2, F.TYPE_BYTES, opt, None)], meta)
    summary = message("Summary", [("value", 1, F.TYPE_MESSAGE, rep, ".tb.Summary.Value")])
    message("Image", [("height", 1, F.TYPE_INT32, opt, None), ("width", 2, F.TYPE_INT32, opt, None),
                      ("colorspace", 3, F.TYPE_INT32, opt, None),
                      ("encoded_image_string", 4, F.TYPE_BYTES, opt, None)], summary)
    message("Value", [("tag", 1, F.TYPE_STRING, opt, None), ("simple_value", 2, F.TYPE_FLOAT, opt, None),
                      ("image", 4, F.TYPE_MESSAGE, opt, ".tb.Summary.Image"),
                      ("tensor", 8, F.TYPE_MESSAGE, opt, ".tb.TensorProto"),
                      ("metadata", 9, F.TYPE_MESSAGE, opt, ".tb.SummaryMetadata")], summary)
    message("SessionLog", [("status", 1, F.TYPE_INT32, opt, None)])
    message("Event", [("wall_time", 1, F.TYPE_DOUBLE, opt, None), ("step", 2, F.TYPE_INT64, opt, None),
                      ("file_version", 3, F.TYPE_STRING, opt, None),
                      ("summary", 5, F.TYPE_MESSAGE, opt, ".tb.Summary"),
                      ("session_log", 7, F.TYPE_MESSAGE, opt, ".tb.SessionLog")])
    # proto3 scalars have no presence: oneof-free; the Event's oneof `what` is read by which is set
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("tb.Event")
    try:
        return message_factory.GetMessageClass(desc)
    except AttributeError:  # protobuf before 4.21
        return message_factory.MessageFactory(pool).GetPrototype(desc)


Event = _schema()


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def masked_crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    c ^= 0xFFFFFFFF
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    """The events of one file; raises on a bad length, CRC or a truncated record."""
    data = open(path, "rb").read()
    at, out = 0, []
    while at < len(data):
        if len(data) - at < 12:
            raise ValueError(f"{path}: a truncated record header at byte {at}")
        (n,) = struct.unpack_from("<Q", data, at)
        (lcrc,) = struct.unpack_from("<I", data, at + 8)
        if lcrc != masked_crc32c(data[at:at + 8]):
            raise ValueError(f"{path}: the length's CRC at byte {at} does not match")
        body = data[at + 12:at + 12 + n]
        if len(body) != n or len(data) < at + 16 + n:
            raise ValueError(f"{path}: a truncated record at byte {at}")
        (dcrc,) = struct.unpack_from("<I", data, at + 12 + n)
        if dcrc != masked_crc32c(body):
            raise ValueError(f"{path}: the data's CRC at byte {at} does not match")
        e = Event()
        e.ParseFromString(body)
        out.append(e)
        at += 16 + n
    return out


def load(logdir):
    files = sorted(glob.glob(os.path.join(logdir, "*tfevents*")))
    events = [(records(p), p) for p in files]
    events.sort(key=lambda ep: ep[0][0].wall_time if ep[0] else 0)
    out = []
    for evs, path in events:
        for e in evs:
            if e.HasField("session_log") and e.session_log.status == 1:  # START: purge
                out = [x for x in out if x[0] < e.step or x[2] == "file_version"]
                out.append((e.step, "", "session_log", path))
                continue
            if e.file_version:
                out.append((e.step, "", "file_version", e.file_version))
            for v in e.summary.value:
                if v.HasField("image"):
                    i = v.image
                    out.append((e.step, v.tag, "image", (i.height, i.width, i.colorspace, i.encoded_image_string)))
                elif v.HasField("tensor") and v.metadata.plugin_data.plugin_name == "text":
                    out.append((e.step, v.tag, "text", v.tensor.string_val[0].decode()))
                else:
                    out.append((e.step, v.tag, "scalar", v.simple_value))
    return out
