// Reads one transcoded episode with the packages Foxglove itself uses and prints what it found as JSON
// (tests/foxglove/test_foxglove_reader.py asserts on it). Usage: node check_mcap.mjs EPISODE.mcap
//
// - @mcap/core's stream reader with CRC validation reads every record; its indexed reader reads the
//   messages again through the summary and the chunk indexes (both must agree);
// - the DataEnd record's data-section CRC is recomputed with @foxglove/crc (@mcap/core's own CRC) over
//   every byte before it: the stream reader does not check that one itself;
// - every foxglove.CompressedVideo message is decoded with the protobuf schema embedded in the file
//   (@mcap/support) and held to @foxglove/schemas' definition of CompressedVideo;
// - each access unit is walked as Annex B: NAL types, SPS/PPS before every IDR, the first slice's type;
// - JSON messages are parsed as a JavaScript reader parses them (doubles), and their exact time object
//   compared, as BigInt, with the record's log time.
import { open } from "node:fs/promises";

import { crc32 } from "@foxglove/crc";
import { CompressedVideo as CompressedVideoSchema } from "@foxglove/schemas/jsonschema.js";
import { McapIndexedReader, McapStreamReader } from "@mcap/core";
import { loadDecompressHandlers, protobufFromBinaryDescriptor } from "@mcap/support";

const path = process.argv[2];
const handle = await open(path, "r");
const bytes = new Uint8Array((await handle.readFile()).buffer);
const decompressHandlers = await loadDecompressHandlers();

// -- every record, CRCs validated ------------------------------------------------------------------------
const stream = new McapStreamReader({ decompressHandlers, validateCrcs: true });
stream.append(bytes);
const schemas = new Map();
const channels = new Map();
const messages = [];
const metadata = {};
let dataEnd;
let footer;
for (let record; (record = stream.nextRecord()); ) {
  if (record.type === "Schema") schemas.set(record.id, record);
  else if (record.type === "Channel") channels.set(record.id, record);
  else if (record.type === "Message") messages.push(record);
  else if (record.type === "Metadata") metadata[record.name] = Object.fromEntries(record.metadata);
  else if (record.type === "DataEnd") dataEnd = record;
  else if (record.type === "Footer") footer = record;
}
const done = stream.done();

// the data section ends where the DataEnd record (opcode 0x0f, 13 bytes) starts, just before the summary
const dataEndAt = Number(footer.summaryStart) - 13;
const dataCrcOk = bytes[dataEndAt] === 0x0f && crc32(bytes.subarray(0, dataEndAt)) === dataEnd.dataSectionCrc;

// -- the same messages through the index ---------------------------------------------------------------------
const readable = {
  size: async () => BigInt(bytes.byteLength),
  read: async (offset, length) => bytes.subarray(Number(offset), Number(offset + length)),
};
const indexed = await McapIndexedReader.Initialize({ readable, decompressHandlers });
let indexedCount = 0;
for await (const _ of indexed.readMessages({ validateCrcs: true })) indexedCount += 1;

// -- schemas stored once -----------------------------------------------------------------------------------
const schemaKeys = [...schemas.values()].map(
  (s) => `${s.name}\u0000${s.encoding}\u0000${Buffer.from(s.data).toString("base64")}`,
);
const duplicateSchemas = schemaKeys.length - new Set(schemaKeys).size;

// -- Annex B -----------------------------------------------------------------------------------------------
function nalUnits(data) {
  const units = [];
  for (let i = 0; i + 3 <= data.length; i += 1) {
    if (data[i] === 0 && data[i + 1] === 0 && data[i + 2] === 1) {
      units.push(i + 3);
      i += 2;
    }
  }
  return units.map((start, k) => ({ start, type: data[start] & 0x1f, end: units[k + 1] ?? data.length }));
}
function firstSliceType(data, start) {
  // first_mb_in_slice, then slice_type: two Exp-Golomb codes after the NAL header (emulation bytes dropped)
  const raw = [];
  for (let i = start + 1; i < Math.min(data.length, start + 24); i += 1) {
    if (i >= start + 3 && data[i] === 3 && data[i - 1] === 0 && data[i - 2] === 0) continue;
    raw.push(data[i]);
  }
  let bit = 0;
  const read = () => (raw[bit >> 3] >> (7 - (bit++ & 7))) & 1;
  const ue = () => {
    let zeros = 0;
    while (read() === 0) zeros += 1;
    let value = 1;
    for (let k = 0; k < zeros; k += 1) value = (value << 1) | read();
    return value - 1;
  };
  ue();
  return ["P", "B", "I", "SP", "SI"][ue() % 5];
}

const cameras = {};
const json = {};
const allowedFields = new Set(Object.keys(CompressedVideoSchema.properties));
for (const message of messages) {
  const channel = channels.get(message.channelId);
  const schema = schemas.get(channel.schemaId);
  if (schema?.name === "foxglove.CompressedVideo") {
    let camera = cameras[channel.topic];
    if (camera === undefined) {
      const type = protobufFromBinaryDescriptor(schema.data).lookupType("foxglove.CompressedVideo");
      camera = cameras[channel.topic] = {
        type, frames: 0, formats: new Set(), foreignFields: new Set(), notAnnexB: 0, keyframes: 0,
        keyframesWithoutParameterSets: 0, sliceTypes: {}, stampsIncreasing: true, last: -1n, logTimeIsStamp: true,
      };
    }
    const video = camera.type.toObject(camera.type.decode(message.data), { longs: String, defaults: true });
    for (const key of Object.keys(video)) if (!allowedFields.has(key)) camera.foreignFields.add(key);
    camera.frames += 1;
    camera.formats.add(video.format);
    const data = video.data;
    const startsAnnexB = data[0] === 0 && data[1] === 0 && (data[2] === 1 || (data[2] === 0 && data[3] === 1));
    if (!startsAnnexB) camera.notAnnexB += 1;
    const units = nalUnits(data);
    const types = units.map((u) => u.type);
    const idr = types.indexOf(5);
    if (idr >= 0) {
      camera.keyframes += 1;
      const before = types.slice(0, idr);
      if (!before.includes(7) || !before.includes(8)) camera.keyframesWithoutParameterSets += 1;
    }
    const slice = units.find((u) => u.type === 1 || u.type === 5);
    const letter = slice ? firstSliceType(data, slice.start) : "none";
    camera.sliceTypes[letter] = (camera.sliceTypes[letter] ?? 0) + 1;
    const stamp = BigInt(video.timestamp.seconds) * 1000000000n + BigInt(video.timestamp.nanos);
    if (stamp <= camera.last) camera.stampsIncreasing = false;
    camera.last = stamp;
  } else if (channel.messageEncoding === "json") {
    const entry = (json[channel.topic] ??= { messages: 0, exactTimes: 0, stampNsAsDoubleExact: 0 });
    const text = new TextDecoder().decode(message.data);
    const record = JSON.parse(text);
    entry.messages += 1;
    if (record.sluice_stamp !== undefined) {
      const time = BigInt(record.sluice_stamp.sec) * 1000000000n + BigInt(record.sluice_stamp.nsec);
      if (time === message.logTime) entry.exactTimes += 1;
    }
    // the integer as written against the double JSON.parse made of it
    const written = /"stamp_ns":(\d+)/.exec(text);
    if (written && typeof record.stamp_ns === "number") {
      entry.stampNs = (entry.stampNs ?? 0) + 1;
      if (BigInt(record.stamp_ns) === BigInt(written[1])) entry.stampNsAsDoubleExact += 1;
    }
  }
}

const out = {
  done,
  dataSectionCrc: dataEnd.dataSectionCrc,
  dataSectionCrcOk: dataCrcOk,
  messages: messages.length,
  indexedMessages: indexedCount,
  schemas: schemas.size,
  duplicateSchemas,
  profile: metadata["sluice.transcode"]?.profile ?? null,
  cameras: Object.fromEntries(
    Object.entries(cameras).map(([topic, c]) => [
      topic,
      {
        frames: c.frames,
        formats: [...c.formats],
        foreignFields: [...c.foreignFields],
        notAnnexB: c.notAnnexB,
        keyframes: c.keyframes,
        keyframesWithoutParameterSets: c.keyframesWithoutParameterSets,
        sliceTypes: c.sliceTypes,
        stampsIncreasing: c.stampsIncreasing,
      },
    ]),
  ),
  json,
};
process.stdout.write(`${JSON.stringify(out)}\n`);
await handle.close();
