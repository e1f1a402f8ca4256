// Files an input names: a shard set's shards, a distributed checkpoint's
// .distcp files. The naming file (an index, a .metadata) and the files it
// names make a graph, and a hostile input can make that graph anything: a
// name that is the naming file itself, two names for one file, a FIFO that
// never ends, an index whose "shard" is another index. NamedFiles resolves
// each name once, in the naming file's directory, and checks every rule that
// keeps the graph small and honest before a byte of a named file is parsed:
//
//   - the name is a plain file name (io/file_names.h): nothing outside the
//     naming file's directory is ever opened;
//   - it is a regular file: a FIFO, socket, device or directory is refused
//     without blocking. A symbolic link is followed to the file it names
//     (the Hugging Face cache links every shard into its snapshot folder);
//   - it is not the naming file itself;
//   - it is not a file already opened under another name (hard or symbolic
//     links): every file of the set is one node of the graph, once.
//
// What a named file holds is decided from its content by its reader, and
// the readers that name files accept only formats that keep all their
// bytes in one file (formats/registry.h: open_named_file): a named file
// never names further files, so the graph has depth one and no path through
// the opener recurses.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "io/input_file.h"

namespace ckptfix {

class NamedFiles {
 public:
  /// `namer` is the naming file; `kind` says what its names are, for
  /// messages ("shard", "data file").
  NamedFiles(std::shared_ptr<const InputFile> namer, std::string kind);

  /// The file `name` names, opened on its first use and the same object on
  /// every later one. `entry` is what names it ("tensor 'w'"), for errors.
  /// Throws Error (naming the file and the entry) when a rule above is broken
  /// or the file cannot be opened.
  const std::shared_ptr<const InputFile>& open(const std::string& name, const std::string& entry);

  /// Whether `name` was opened already.
  bool contains(const std::string& name) const { return by_name_.count(name) != 0; }

 private:
  std::shared_ptr<const InputFile> namer_;
  std::string kind_;
  std::map<std::string, std::shared_ptr<const InputFile>> by_name_;
  std::map<InputFile::Identity, std::string> name_of_;  // each opened file -> the name it was opened by
};

}  // namespace ckptfix
