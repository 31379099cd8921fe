// Survives files that shrink under their memory maps.
//
// Reading a mapped page past a file's new end (someone `cp`s a new checkpoint over
// the one being loaded, or truncates a data shard) raises SIGBUS, which kills the
// process with nothing logged. MappedFile registers its mappings here; the SIGBUS
// handler, for a fault inside a registered mapping, maps a page of zeros over the
// faulting page (so the read completes), marks the mapping changed and returns.
// The reader then learns from MappedFile::changed() that what it read is not the
// file, and refuses it with a clear error. A fault anywhere else is passed to the
// previous handler (or the default one), so genuine bugs still crash loudly.
#pragma once

#include <cstddef>

namespace distllm::mapping_guard {

// Registers [begin, begin + size); returns a slot for changed() and release(), or
// -1 when every slot is taken (the mapping is then unguarded). Installs the handler
// on first use. Thread-safe.
int add(const void* begin, size_t size);
void release(int slot);
// Whether a read of the slot's range faulted (the file shrank under it).
bool faulted(int slot);

}  // namespace distllm::mapping_guard
