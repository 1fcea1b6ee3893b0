// Reading a Hugging Face tokenizer.json (+ tokenizer_config.json) into the shared BPE tables.
//
// One non-obvious decision: everything that is not byte-level BPE is refused at load time with
// the JSON path of the offending value (`pre_tokenizer.pretokenizers[1].type "Metaspace" is not
// supported`), never approximated: a tokenizer that loads here encodes exactly as the library
// does, and one that would differ does not load. What the library ignores for encoding
// (truncation, padding, offsets trimming) is ignored here too.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/core/error.h"
#include "engine/tokenizer/bpe_impl.h"
#include "engine/tokenizer/unicode_text.h"

namespace flotilla {

const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

using nlohmann::json;

struct Source {
  std::string name;  // "tokenizer.json /path/tokenizer.json"
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw_data(name + ": " + path + " " + what);
  }
};

const json* member(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

bool get_bool(const Source& src, const json& obj, const char* key, bool fallback, const std::string& path) {
  const json* v = member(obj, key);
  if (!v) return fallback;
  if (!v->is_boolean()) src.fail(path + "." + key, "must be true or false, not " + v->dump());
  return v->get<bool>();
}

std::string type_of(const Source& src, const json& obj, const std::string& path) {
  if (!obj.is_object()) src.fail(path, "must be an object, not " + obj.dump().substr(0, 80));
  const json* t = member(obj, "type");
  if (!t || !t->is_string()) src.fail(path + ".type", "is missing");
  return t->get<std::string>();
}

// The ByteLevel decoder's rule for one token string: its characters through the byte map, or its
// UTF-8 bytes as they are when some character is not in the map.
std::string decoded_bytes(const std::string& token) {
  std::string bytes;
  return gpt2_text_to_bytes(token, &bytes) ? bytes : token;
}

void parse_normalizer(const Source& src, const json& n, const std::string& path, HfPipeline& p) {
  const std::string type = type_of(src, n, path);
  if (type == "NFC") {
    p.nfc = true;
  } else if (type == "Sequence") {
    const json* list = member(n, "normalizers");
    if (!list || !list->is_array()) src.fail(path + ".normalizers", "must be a list");
    for (size_t i = 0; i < list->size(); ++i)
      parse_normalizer(src, (*list)[i], path + ".normalizers[" + std::to_string(i) + "]", p);
  } else {
    src.fail(path + ".type", "\"" + type + "\" is not supported (NFC, a Sequence of NFC, or none)");
  }
}

void parse_pre_tokenizer(const Source& src, const json& n, const std::string& path, HfPipeline& p) {
  const std::string type = type_of(src, n, path);
  if (!p.steps.empty() && p.steps.back().kind == HfPreStep::Kind::kByteLevel)
    src.fail(path, "follows the ByteLevel step; only a last ByteLevel step is supported");
  HfPreStep step;
  if (type == "Sequence") {
    const json* list = member(n, "pretokenizers");
    if (!list || !list->is_array()) src.fail(path + ".pretokenizers", "must be a list");
    for (size_t i = 0; i < list->size(); ++i)
      parse_pre_tokenizer(src, (*list)[i], path + ".pretokenizers[" + std::to_string(i) + "]", p);
    return;
  } else if (type == "Split") {
    const json* pattern = member(n, "pattern");
    if (!pattern || !pattern->is_object()) src.fail(path + ".pattern", "is missing");
    if (const json* r = member(*pattern, "Regex"); r && r->is_string())
      step.regex = SplitRegex::oniguruma(r->get<std::string>(), src.name + ": " + path + ".pattern.Regex");
    else if (const json* s = member(*pattern, "String"); s && s->is_string())
      step.regex = SplitRegex::literal(s->get<std::string>(), src.name + ": " + path + ".pattern.String");
    else
      src.fail(path + ".pattern", "must be {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    const json* behavior = member(n, "behavior");
    if (!behavior || !behavior->is_string() ||
        !parse_split_behavior(behavior->get<std::string>(), &step.behavior))
      src.fail(path + ".behavior",
               (behavior ? behavior->dump() : std::string("(missing)")) +
                   " is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
    step.invert = get_bool(src, n, "invert", false, path);
    step.kind = HfPreStep::Kind::kSplit;
    const json* r = member(*pattern, "Regex");
    const std::string text = r && r->is_string() ? r->get<std::string>() : std::string();
    if (text != kGpt2Pattern && text != kLlama3Pattern && text != kQwen2Pattern) p.cut_safe = false;
  } else if (type == "Digits") {
    step.kind = HfPreStep::Kind::kDigits;
    step.regex = SplitRegex::oniguruma("\\p{N}", path);
    step.behavior = get_bool(src, n, "individual_digits", false, path) ? SplitBehavior::kIsolated
                                                                       : SplitBehavior::kContiguous;
  } else if (type == "ByteLevel") {
    step.kind = HfPreStep::Kind::kByteLevel;
    step.add_prefix_space = get_bool(src, n, "add_prefix_space", true, path);
    step.use_regex = get_bool(src, n, "use_regex", true, path);
    if (step.use_regex) step.regex = SplitRegex::oniguruma(kGpt2Pattern, path);
    if (step.add_prefix_space) p.cut_safe = false;
  } else {
    src.fail(path + ".type",
             "\"" + type + "\" is not supported (byte-level BPE only: ByteLevel, Split, Digits, Sequence)");
  }
  p.steps.push_back(std::move(step));
}

// Appends the ids a TemplateProcessing "single" template puts before and after $A.
void parse_template(const Source& src, const json& n, const std::string& path, Tokenizer::Impl& d) {
  const json* single = member(n, "single");
  if (!single || !single->is_array()) src.fail(path + ".single", "must be a list");
  const json* specials = member(n, "special_tokens");
  bool after = false;
  for (size_t i = 0; i < single->size(); ++i) {
    const json& item = (*single)[i];
    const std::string ipath = path + ".single[" + std::to_string(i) + "]";
    if (const json* seq = member(item, "Sequence")) {
      const json* id = member(*seq, "id");
      if (!id || !id->is_string() || id->get<std::string>() != "A")
        src.fail(ipath + ".Sequence.id", "must be \"A\" in a single-sequence template");
      after = true;
      continue;
    }
    const json* tok = member(item, "SpecialToken");
    const json* name = tok ? member(*tok, "id") : nullptr;
    if (!name || !name->is_string())
      src.fail(ipath, "must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    const json* entry = specials ? member(*specials, name->get<std::string>().c_str()) : nullptr;
    const json* ids = entry ? member(*entry, "ids") : nullptr;
    if (!ids || !ids->is_array())
      src.fail(path + ".special_tokens", "has no ids for " + name->dump() + " used by " + ipath);
    for (const json& v : *ids) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() >= d.tokens.size() || !d.defined[v.get<size_t>()])
        src.fail(path + ".special_tokens." + name->get<std::string>() + ".ids",
                 v.dump() + " is not a token id");
      (after ? d.hf->suffix : d.hf->prefix).push_back(v.get<uint32_t>());
    }
  }
}

void parse_post_processor(const Source& src, const json& n, const std::string& path, Tokenizer::Impl& d) {
  const std::string type = type_of(src, n, path);
  if (type == "ByteLevel") return;  // only trims offsets
  if (type == "TemplateProcessing") {
    parse_template(src, n, path, d);
  } else if (type == "Sequence") {
    const json* list = member(n, "processors");
    if (!list || !list->is_array()) src.fail(path + ".processors", "must be a list");
    for (size_t i = 0; i < list->size(); ++i)
      parse_post_processor(src, (*list)[i], path + ".processors[" + std::to_string(i) + "]", d);
  } else {
    src.fail(path + ".type", "\"" + type + "\" is not supported (TemplateProcessing, ByteLevel, Sequence)");
  }
}

void parse_decoder(const Source& src, const json* n, const std::string& path) {
  if (!n) src.fail(path, "is missing: byte-level BPE needs the ByteLevel decoder");
  const std::string type = type_of(src, *n, path);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const json* list = member(*n, "decoders");
    if (!list || !list->is_array() || list->empty()) src.fail(path + ".decoders", "must be a non-empty list");
    for (size_t i = 0; i < list->size(); ++i)
      parse_decoder(src, &(*list)[i], path + ".decoders[" + std::to_string(i) + "]");
    return;
  }
  src.fail(path + ".type", "\"" + type + "\" is not supported (byte-level BPE needs the ByteLevel decoder)");
}

void set_token(Tokenizer::Impl& d, uint32_t id, std::string bytes) {
  if (id >= d.tokens.size()) {
    d.tokens.resize(id + 1);
    d.defined.resize(id + 1, 0);
    d.special.resize(id + 1, 0);
  }
  d.tokens[id] = std::move(bytes);
  d.defined[id] = 1;
}

// Returns model.vocab (token text -> id).
std::unordered_map<std::string, uint32_t> parse_model(const Source& src, const json& root,
                                                      Tokenizer::Impl& d) {
  const json* model = member(root, "model");
  if (!model) src.fail("\"model\"", "is missing: not a tokenizer.json (expected a \"model\" object)");
  if (!model->is_object()) src.fail("model", "must be an object");
  const json* type = member(*model, "type");
  if (type && (!type->is_string() || type->get<std::string>() != "BPE"))
    src.fail("model.type", type->dump() + " is not supported (byte-level BPE only)");
  if (!type && !member(*model, "merges"))
    src.fail("model.type", "is missing and the model has no merges (byte-level BPE only)");
  if (const json* drop = member(*model, "dropout"); drop && (!drop->is_number() || drop->get<double>() != 0))
    src.fail("model.dropout", drop->dump() + " is not supported (BPE dropout makes encoding random)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (const json* v = member(*model, key); v && (!v->is_string() || !v->get<std::string>().empty()))
      src.fail(std::string("model.") + key, v->dump() + " is not supported (byte-level BPE only)");
  if (get_bool(src, *model, "byte_fallback", false, "model"))
    src.fail("model.byte_fallback", "true is not supported (SentencePiece-style BPE; byte-level BPE only)");
  d.hf->ignore_merges = get_bool(src, *model, "ignore_merges", false, "model");

  const json* vocab = member(*model, "vocab");
  if (!vocab || !vocab->is_object() || vocab->empty())
    src.fail("model.vocab", "must be an object of token -> id");
  std::unordered_map<std::string, uint32_t> id_of;
  id_of.reserve(vocab->size());
  // The token table is indexed by id, so an id is bounded by the number of entries before anything
  // is sized by it: real vocabularies number their tokens 0..N-1, and the slack allows sparse ones
  // (RELIABILITY A9: one id of 2^26 in a 19 KB file took 2.2 GB).
  const uint64_t id_limit = std::min<uint64_t>(2 * static_cast<uint64_t>(vocab->size()) + 65536, uint64_t{1} << 31);
  for (const auto& [text, value] : vocab->items()) {
    if (!value.is_number_unsigned())
      src.fail("model.vocab",
               "token " + json(text).dump() + " has id " + value.dump() + "; ids must be >= 0");
    if (value.get<uint64_t>() >= id_limit)
      src.fail("model.vocab", "token " + json(text).dump() + " has id " + value.dump() +
                                  ", far beyond the vocabulary's " + std::to_string(vocab->size()) +
                                  " entries (ids must be below " + std::to_string(id_limit) +
                                  "): the file is damaged; use the tokenizer.json the model was saved with");
    const uint32_t id = value.get<uint32_t>();
    if (id < d.defined.size() && d.defined[id])
      src.fail("model.vocab", "id " + std::to_string(id) + " is used twice (" + json(text).dump() + ")");
    std::string bytes;
    if (gpt2_text_to_bytes(text, &bytes)) {
      d.hf->whole_tokens.emplace(bytes, id);
      set_token(d, id, std::move(bytes));
    } else {
      set_token(d, id, text);  // not in byte form: reachable only as an added token; decodes as its text
    }
    id_of.emplace(text, id);
  }

  const json* merges = member(*model, "merges");
  if (!merges || !merges->is_array()) src.fail("model.merges", "must be a list");
  d.merges.reserve(merges->size());
  for (size_t r = 0; r < merges->size(); ++r) {
    const json& m = (*merges)[r];
    const std::string path = "model.merges[" + std::to_string(r) + "]";
    std::string a, b;
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == line.size() ||
          line.find(' ', space + 1) != std::string::npos)
        src.fail(path, m.dump() + " must be two tokens separated by one space");
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      src.fail(path, m.dump().substr(0, 80) + " must be \"A B\" or [\"A\", \"B\"]");
    }
    const auto ia = id_of.find(a), ib = id_of.find(b), ir = id_of.find(a + b);
    if (ia == id_of.end() || ib == id_of.end())
      src.fail(path, "names " + json(ia == id_of.end() ? a : b).dump() + ", which is not in model.vocab");
    if (ir == id_of.end()) src.fail(path, "makes " + json(a + b).dump() + ", which is not in model.vocab");
    d.merges.push_back({ia->second, ib->second, ir->second});
  }
  return id_of;
}

// The library ignores the ids written in added_tokens: each token, in file order, takes the id of
// the same text in the vocabulary (or of an earlier added token), else the next free id counted
// from the number of vocabulary entries. Well-formed files agree with their ids; this follows the
// library where they do not.
void parse_added_tokens(const Source& src, const json& root,
                        const std::unordered_map<std::string, uint32_t>& vocab, Tokenizer::Impl& d) {
  const json* list = member(root, "added_tokens");
  if (!list) return;
  if (!list->is_array()) src.fail("added_tokens", "must be a list");
  std::unordered_map<std::string, uint32_t> added_id;
  uint32_t next_id = static_cast<uint32_t>(vocab.size());
  for (size_t i = 0; i < list->size(); ++i) {
    const json& t = (*list)[i];
    const std::string path = "added_tokens[" + std::to_string(i) + "]";
    const json* id = member(t, "id");
    const json* content = member(t, "content");
    if (!id || !id->is_number_unsigned() || id->get<uint64_t>() >= (uint64_t{1} << 31))
      src.fail(path + ".id", "must be a token id");
    if (!content || !content->is_string()) src.fail(path + ".content", "must be a string");
    HfAddedToken a;
    a.content = content->get<std::string>();
    if (a.content.empty()) continue;  // the library ignores empty added tokens
    if (const auto it = added_id.find(a.content); it != added_id.end())
      a.id = it->second;
    else if (const auto v = vocab.find(a.content); v != vocab.end())
      a.id = v->second;
    else
      a.id = next_id++;
    added_id[a.content] = a.id;
    a.single_word = get_bool(src, t, "single_word", false, path);
    a.lstrip = get_bool(src, t, "lstrip", false, path);
    a.rstrip = get_bool(src, t, "rstrip", false, path);
    a.special = get_bool(src, t, "special", false, path);
    a.normalized = get_bool(src, t, "normalized", !a.special, path);
    a.pattern = a.normalized && d.hf->nfc ? nfc(a.content) : a.content;
    if (a.lstrip || a.rstrip || a.content.find('\n') != std::string::npos) d.hf->cut_safe = false;
    set_token(d, a.id, decoded_bytes(a.pattern));
    d.hf->added.push_back(std::move(a));
  }
  // One token per content (a repeated content keeps its last entry, as the library's map does).
  std::unordered_map<std::string, size_t> last;
  for (size_t i = 0; i < d.hf->added.size(); ++i) last[d.hf->added[i].content] = i;
  std::vector<HfAddedToken> kept;
  for (size_t i = 0; i < d.hf->added.size(); ++i)
    if (last[d.hf->added[i].content] == i) kept.push_back(std::move(d.hf->added[i]));
  d.hf->added = std::move(kept);
  for (uint32_t i = 0; i < d.hf->added.size(); ++i) {
    const HfAddedToken& a = d.hf->added[i];
    HfAddedSet& set = a.normalized ? d.hf->normalized_set : d.hf->raw_set;
    set.by_first_byte[static_cast<uint8_t>(a.pattern[0])].push_back(i);
    set.empty = false;
    if (a.special) {
      d.special[a.id] = 1;
      d.specials.push_back({a.id, a.content});
    }
  }
  for (HfAddedSet* set : {&d.hf->raw_set, &d.hf->normalized_set})
    for (auto& bucket : set->by_first_byte)
      std::stable_sort(bucket.begin(), bucket.end(), [&](uint32_t x, uint32_t y) {
        return d.hf->added[x].pattern.size() > d.hf->added[y].pattern.size();
      });
}

std::optional<uint32_t> find_token(const Tokenizer::Impl& d, std::string_view content) {
  for (const HfAddedToken& a : d.hf->added)
    if (a.content == content) return a.id;
  std::string bytes;
  if (gpt2_text_to_bytes(content, &bytes)) {
    const auto it = d.hf->whole_tokens.find(bytes);
    if (it != d.hf->whole_tokens.end()) return it->second;
  }
  return std::nullopt;
}

// tokenizer_config.json: the named tokens (bos_token, eos_token, pad_token).
void apply_config(const Source& src, const json& cfg, Tokenizer::Impl& d) {
  if (!cfg.is_object()) src.fail("(top level)", "must be a JSON object");
  auto named = [&](const char* key) -> std::optional<uint32_t> {
    const json* v = member(cfg, key);
    if (!v) return std::nullopt;
    std::string text;
    if (v->is_string())
      text = v->get<std::string>();
    else if (const json* c = member(*v, "content"); c && c->is_string())
      text = c->get<std::string>();
    else
      src.fail(key, "must be a token string or {\"content\": ...}, not " + v->dump().substr(0, 80));
    const auto id = find_token(d, text);
    if (!id) src.fail(key, json(text).dump() + " is not a token of the tokenizer.json");
    return id;
  };
  if (auto v = named("bos_token")) d.hf->bos = v;
  if (auto v = named("eos_token")) d.hf->eos = v;
  if (auto v = named("pad_token")) d.hf->pad = v;
  // transformers adds the config's added_tokens_decoder entries that tokenizer.json lacks; such a
  // pair of files would encode differently here, so it is refused.
  if (const json* dec = member(cfg, "added_tokens_decoder"); dec && dec->is_object())
    for (const auto& [key, value] : dec->items()) {
      const json* content = member(value, "content");
      if (!content || !content->is_string()) continue;
      const auto id = find_token(d, content->get<std::string>());
      if (!id || std::to_string(*id) != key)
        src.fail(
            "added_tokens_decoder[\"" + key + "\"]",
            content->dump() +
                (id ? " has id " + std::to_string(*id) + " in tokenizer.json" : " is not in tokenizer.json") +
                " (transformers would add it); make the two files agree");
    }
  // add_bos_token / add_eos_token are not read: transformers drops them when a tokenizer.json is
  // present, so its post-processor alone decides which tokens a sequence gets.
}

}  // namespace

void Tokenizer::Impl::build_hf_index(const std::string& source) {
  const std::string where = "tokenizer.json " + source + ": ";
  std::array<bool, 256> seen{};
  for (int b = 0; b < 256; ++b) {
    const auto it = hf->whole_tokens.find(std::string(1, static_cast<char>(b)));
    if (it == hf->whole_tokens.end()) continue;
    seen[static_cast<size_t>(b)] = true;
    byte_id[static_cast<size_t>(b)] = it->second;
  }
  for (int b = 0; b < 256; ++b)
    if (!seen[static_cast<size_t>(b)])
      throw_data(where + "model.vocab has no token for byte " + std::to_string(b) + " ('" +
                 gpt2_bytes_to_text(std::string(1, static_cast<char>(b))) +
                 "'): byte-level BPE needs all 256 (train with the ByteLevel alphabet)");
  rank.clear();
  rank.reserve(merges.size() * 2);
  for (size_t r = 0; r < merges.size(); ++r) {
    const Merge& m = merges[r];
    // Merges of tokens that are not in byte form can never apply to byte-level text.
    if (tokens[m.left] + tokens[m.right] != tokens[m.result]) continue;
    rank[pair_key(m.left, m.right)] = static_cast<uint32_t>(r);  // a repeated pair keeps its last rank
  }
  eot = UINT32_MAX;
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>"})
    if (eot == UINT32_MAX) {
      const auto id = find_token(*this, name);
      if (id) eot = *id;
    }
  if (eot == UINT32_MAX && hf->eos) eot = *hf->eos;
  std::lock_guard<std::mutex> lock(cache_mutex);
  cache.clear();
}

Tokenizer Tokenizer::from_hf_json(const std::string& json_text, const std::string& source_name,
                                  const std::string& config_text, const std::string& config_name) {
  const Source src{"tokenizer.json " + source_name};
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw_data(src.name + ": not valid JSON (" + e.what() + ")");
  }
  if (!root.is_object()) src.fail("(top level)", "must be a JSON object");
  auto impl = std::make_unique<Impl>();
  impl->origin = "tokenizer.json";
  impl->hf = std::make_unique<HfPipeline>();
  HfPipeline& p = *impl->hf;
  p.cut_safe = true;
  try {
    if (const json* n = member(root, "normalizer")) parse_normalizer(src, *n, "normalizer", p);
    const json* pre = member(root, "pre_tokenizer");
    if (!pre) src.fail("pre_tokenizer", "is missing: byte-level BPE needs a ByteLevel pre-tokenizer");
    parse_pre_tokenizer(src, *pre, "pre_tokenizer", p);
    if (p.steps.empty() || p.steps.back().kind != HfPreStep::Kind::kByteLevel)
      src.fail("pre_tokenizer", "has no ByteLevel step: only byte-level BPE is supported");
    const auto vocab = parse_model(src, root, *impl);
    parse_added_tokens(src, root, vocab, *impl);
    if (const json* post = member(root, "post_processor"))
      parse_post_processor(src, *post, "post_processor", *impl);
    parse_decoder(src, member(root, "decoder"), "decoder");
  } catch (const json::exception& e) {
    throw_data(src.name + ": malformed (" + std::string(e.what()) + ")");
  }
  // Named tokens: the usual names of the families, then tokenizer_config.json.
  if (auto id = find_token(*impl, "<|begin_of_text|>")) p.bos = id;
  for (const char* name : {"<|end_of_text|>", "<|endoftext|>"})
    if (!p.eos)
      if (auto id = find_token(*impl, name)) p.eos = id;
  if (!config_text.empty()) {
    const Source csrc{"tokenizer_config.json " + config_name};
    json cfg;
    try {
      cfg = json::parse(config_text);
    } catch (const json::exception& e) {
      throw_data(csrc.name + ": not valid JSON (" + e.what() + ")");
    }
    apply_config(csrc, cfg, *impl);
  }
  impl->build_hf_index(source_name);
  Tokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

Tokenizer Tokenizer::load_hf(const std::string& tokenizer_json_path, const std::string& config_json_path) {
  auto slurp = [](const std::string& path, const std::string& what) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw_data(what + " " + path + ": cannot read (missing or unreadable)");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string text = slurp(tokenizer_json_path, "tokenizer.json");
  const std::string config =
      config_json_path.empty() ? std::string() : slurp(config_json_path, "tokenizer_config.json");
  return from_hf_json(text, tokenizer_json_path, config, config_json_path);
}

}  // namespace flotilla
