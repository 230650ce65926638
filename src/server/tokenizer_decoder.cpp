#include "server/tokenizer_decoder.h"

#include "tokenizer/detokenizer.h"

namespace mla::server {

namespace {

class StreamDecoder : public IncrementalDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool skip_special) : detok_(tok, skip_special) {}
  std::string push(int32_t token) override { return detok_.feed(token); }
  std::string flush() override { return detok_.finish(); }

 private:
  StreamDetokenizer detok_;
};

}  // namespace

// Byte-level BPE tokens carry their own spaces, so the prompt is not needed as context.
std::unique_ptr<IncrementalDecoder> TokenizerDecoder::start(std::span<const int32_t> /*prompt*/,
                                                            bool skip_special_tokens) const {
  return std::make_unique<StreamDecoder>(tok_, skip_special_tokens);
}

}  // namespace mla::server
