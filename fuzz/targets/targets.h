// The fuzz targets, as plain functions: each runs one reader on hostile
// bytes. libFuzzer drives them (fuzz/fuzzer_main.cc, built with
// CKPTFIX_FUZZ=ON and clang); tests/unit/fuzz_regressions_test.cc replays
// the committed findings through them in every build. A target returns
// normally on clean input and on a clean refusal (ckptfix::Error); anything
// else (a crash, a sanitizer report, abort() on a broken invariant, an
// escaping exception) is a finding.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ckptfix::fuzz {

/// Checkpoint::from_bytes, then what inspect and verify do with the checkpoint.
void checkpoint(const uint8_t* data, size_t size);
/// The unpickler alone, default global policy.
void unpickle(const uint8_t* data, size_t size);
/// unpickle -> pickle -> unpickle: reads back, same graph, no new globals.
void pickle_roundtrip(const uint8_t* data, size_t size);
/// The zip reader, every record read back (inflated) with a size cap.
void zip(const uint8_t* data, size_t size);
/// The legacy stream reader and the tables built from it.
void legacy(const uint8_t* data, size_t size);
/// The safetensors header (parse, write, parse back equal) and reader.
void safetensors(const uint8_t* data, size_t size);
/// The shard-set index parser: every shard a plain file name.
void shard_index(const uint8_t* data, size_t size);
/// The .metadata parser of distributed checkpoints (restricted unpickle, structure, chunk bounds).
void dcp_metadata(const uint8_t* data, size_t size);
/// A directory of files that name each other (shard indexes and shards, a
/// .metadata and its .distcp files, links, FIFOs), opened with every reader.
/// The input is up to 8 entries, each: a kind byte (mod 5: 0 file, 1
/// symbolic link, 2 hard link, 3 FIFO, 4 directory), a name length byte and
/// the name (sanitised to [A-Za-z0-9._-]), a 32-bit little-endian length and
/// the content (a file's bytes, or the name a link points to).
void file_graph(const uint8_t* data, size_t size);
/// The fit's rules on a JSON model reference, --rename patterns and keys
/// (fuzz/targets/fit.cc has the input's layout): one-to-one, consistent plans.
void fit(const uint8_t* data, size_t size);
/// salvage_checkpoint of the input as a (damaged) file: every storage kept
/// reads back whole, and the salvaged checkpoint saves and verifies.
void salvage(const uint8_t* data, size_t size);
/// The rerun record an output carries (issue 65): written files are plain
/// names, and a record reads back as itself.
void made_from(const uint8_t* data, size_t size);
/// The call analysis of a pickle while it is read, of its finished graph and
/// of the pickle written from that graph: each bounds the next (issue 33).
void call_policy(const uint8_t* data, size_t size);
/// The bytes as a module's uint8 extra state (nested.h, issue 66): read,
/// never thrown on, and every gadget or unreadable pickle a violation.
void nested(const uint8_t* data, size_t size);

}  // namespace ckptfix::fuzz
