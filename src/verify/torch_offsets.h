// The storage offsets torch >= 2.7 computes instead of reading them.
//
// For an archive with `.format_version` >= 1, torch.load with mmap=True and
// `torch.utils.serialization.config.load.calculate_storage_offsets`, with
// TORCH_SERIALIZATION_DEBUG=1, or onto `meta`, does not read where each
// storage record is: it takes the first storage's offset from the archive
// and computes every next one from the previous (torch/serialization.py
// `_get_offset`), assuming miniz's layout: keys from "0" in first-use
// order, records back to back, the least FB padding that aligns the data to
// `.storage_alignment`, a 16-byte data descriptor after each non-empty
// record (24 with zip64). A writer that promises `.format_version` with any
// other layout is misread silently.
#pragma once

#include "model/checkpoint_impl.h"
#include "zip/zip_reader.h"

namespace ckptfix {

/// Does nothing unless `zip` has `<root>/.format_version` >= 1; then checks
/// every storage of `checkpoint` (opened from `zip`) is where torch computes
/// it. Throws Error(kCorrupt) at the first storage torch would misread,
/// with both offsets.
void check_torch_computed_offsets(const Checkpoint& checkpoint, const ZipReader& zip);

}  // namespace ckptfix
