// Minimal binary writer/reader for the engine's control messages (little-endian host layout; all
// ranks run the same build). Reader throws on truncation instead of reading past the end.
#pragma once
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace hs {

class WireWriter {
 public:
  template <typename T>
  void put(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void put_str(const std::string& s) {
    put<uint32_t>(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  template <typename T>
  void put_vec(const std::vector<T>& v) {
    put<uint32_t>(static_cast<uint32_t>(v.size()));
    out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class WireReader {
 public:
  explicit WireReader(const std::string& s) : s_(s) {}
  template <typename T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string get_str() {
    uint32_t n = get<uint32_t>();
    need(n);
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  template <typename T>
  std::vector<T> get_vec() {
    uint32_t n = get<uint32_t>();
    need(static_cast<size_t>(n) * sizeof(T));
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), s_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  bool done() const { return pos_ >= s_.size(); }

 private:
  void need(size_t n) {
    if (pos_ + n > s_.size()) throw std::runtime_error("truncated control message");
  }
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace hs
