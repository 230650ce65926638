#include "engine/text_decoder.h"

#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace mla {
namespace {

class StreamDecoder : public IncrementalDecoder {
 public:
  StreamDecoder(std::shared_ptr<const Tokenizer> tok, bool skip_special)
      : tok_(std::move(tok)), detok_(*tok_, skip_special) {}
  std::string push(int32_t token) override { return detok_.feed(token); }
  std::string flush() override { return detok_.finish(); }

 private:
  std::shared_ptr<const Tokenizer> tok_;  // keeps the tokenizer alive for detok_
  StreamDetokenizer detok_;
};

}  // namespace

// Byte-level BPE tokens carry their own bytes (spaces included), so the prompt is not needed as
// context.
std::unique_ptr<IncrementalDecoder> TokenizerDecoder::start(std::span<const int32_t> /*prompt*/,
                                                            bool skip_special_tokens) const {
  return std::make_unique<StreamDecoder>(tok_, skip_special_tokens);
}

}  // namespace mla
