// CRC-32C (Castagnoli) of tensor bytes, and per-tensor checksums kept in a safetensors file's
// __metadata__ as "checksum.<tensor>" = 8 lowercase hex digits. Trap: the checksum covers the raw
// stored bytes (after any dtype conversion on write), so compare it before converting on read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cnn {

class SafetensorsWriter;
class SafetensorsFile;

// CRC-32C, reflected polynomial 0x82F63B78, init and final xor 0xFFFFFFFF (iSCSI, RFC 3720).
// Pass an earlier result as `crc` to continue over a following buffer. Slicing-by-8.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// One bit at a time from the polynomial: the obvious reference the fast version is tested against.
uint32_t crc32c_bitwise(const void* data, size_t n, uint32_t crc = 0);

std::string checksum_hex(uint32_t crc);                           // "e3069283"
bool parse_checksum_hex(const std::string& text, uint32_t& crc);  // false unless exactly 8 hex digits
std::string compute_checksum(const void* data, size_t n);          // checksum_hex(crc32c(...))

inline constexpr const char* kChecksumKeyPrefix = "checksum.";
std::string checksum_key(const std::string& tensor_name);  // "checksum.<tensor_name>"

// Sets checksum.<name> metadata for every tensor added to `writer` so far.
void add_checksums(SafetensorsWriter& writer);

struct ChecksumReport {
  size_t matched = 0;                  // tensors whose checksum matched
  std::vector<std::string> unchecked;  // tensors without a checksum entry, file order
  std::string first_mismatch;          // tensor name of the first problem, "" when none
  std::string message;                 // what is wrong with it, "" when none
  bool ok() const { return first_mismatch.empty(); }
};

// Compares every checksum.<tensor> entry with the tensor's bytes, in file order; an entry for an
// absent tensor or one that is not 8 hex digits is a mismatch too. Never throws on bad entries.
ChecksumReport verify_checksums(const SafetensorsFile& file);

}  // namespace cnn
