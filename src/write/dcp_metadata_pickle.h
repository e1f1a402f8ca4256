// The `.metadata` of a distributed checkpoint written from one process: the
// pickle of torch.distributed.checkpoint's Metadata dataclass that
// FileSystemWriter.finish dumps, built as a value graph and written by
// ckptfix's pickler (protocol 2, which pickle.load reads in every Python 3).
// Its layout, and where each field comes from, is docs/dcp-format-notes.md (a).
#pragma once

#include <string>
#include <vector>

#include "formats/dcp_metadata.h"

namespace ckptfix {

/// The pickle of a Metadata whose state_dict_metadata, planner_data and
/// storage_data describe `entries` in their order (each tensor of one chunk,
/// the whole tensor), with a StorageMeta naming `checkpoint_id` (the
/// directory as it was given) and `save_id`, and version "1.0.0" (what
/// torch 2.14 writes; torch 2.6 reads it as an extra attribute).
std::string dcp_metadata_pickle(const std::vector<DcpEntry>& entries, const std::string& checkpoint_id,
                                const std::string& save_id);

/// A random version-4 UUID in its usual text form: DCP's save_id (uuid4()).
std::string random_uuid4();

}  // namespace ckptfix
