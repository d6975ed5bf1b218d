// Chat templates: the ChatML family only (SmolLM2, Qwen, ...). See qdec/model.h.
//
// A GGUF file carries its template as Jinja text (`tokenizer.chat_template`); qdec does not run Jinja. It
// recognizes ChatML by its markers and renders it directly; anything else is refused rather than guessed.
#include "qdec/model.h"

namespace qdec {

namespace {
constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";
}  // namespace

Status apply_chat_template(const GgufFile& file, const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                           std::string* out) {
  const GgufValue* v = file.find("tokenizer.chat_template");
  if (v == nullptr) {
    return Status(StatusCode::kInvalidArgument, "the model has no tokenizer.chat_template (run without --chat)");
  }
  std::string tmpl;
  QDEC_RETURN_IF_ERROR(GgufFile::value_as(*v, &tmpl));
  if (tmpl.find(kStart) == std::string::npos || tmpl.find(kEnd) == std::string::npos ||
      tmpl.find("message['role']") == std::string::npos || tmpl.find("message['content']") == std::string::npos) {
    return Status(StatusCode::kUnsupported, "chat template '" + tmpl.substr(0, 60) +
                                                "...' is not ChatML (<|im_start|>role ... <|im_end|>), the only "
                                                "family qdec implements");
  }
  // The default system message: a literal '<|im_start|>system\n...<|im_end|>' in the template, emitted when
  // the conversation does not start with a system message.
  std::string default_system;
  bool has_default_system = false;
  const std::string sys_marker = std::string(kStart) + "system\n";
  if (const size_t s = tmpl.find(sys_marker); s != std::string::npos) {
    const size_t begin = s + sys_marker.size();
    const size_t e = tmpl.find(kEnd, begin);
    if (e != std::string::npos && tmpl.find('{', begin) > e && tmpl.find('\'', begin) > e) {
      default_system = tmpl.substr(begin, e - begin);
      has_default_system = true;
    }
  }
  std::string text;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role.empty() || m.role.find('\n') != std::string::npos) {
      return Status(StatusCode::kInvalidArgument, "chat message " + std::to_string(i) + " has role '" + m.role + "'");
    }
    if (i == 0 && m.role != "system" && has_default_system) {
      text += sys_marker + default_system + std::string(kEnd) + "\n";
    }
    text += std::string(kStart) + m.role + "\n" + m.content + std::string(kEnd) + "\n";
  }
  if (add_generation_prompt) text += std::string(kStart) + "assistant\n";
  *out = std::move(text);
  return Status::Ok();
}

}  // namespace qdec
