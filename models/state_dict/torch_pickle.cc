#include "models/state_dict/torch_pickle.h"

#include <cstring>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/byte_codec.h"
#include "base/status_macros.h"

namespace dtrain::models::state_dict {
namespace {

constexpr std::pair<Dtype, absl::string_view> kStorageClasses[] = {
    {Dtype::kF64, "DoubleStorage"}, {Dtype::kF32, "FloatStorage"},
    {Dtype::kF16, "HalfStorage"},   {Dtype::kBF16, "BFloat16Storage"},
    {Dtype::kI64, "LongStorage"},   {Dtype::kI32, "IntStorage"},
    {Dtype::kI16, "ShortStorage"},  {Dtype::kI8, "CharStorage"},
    {Dtype::kU8, "ByteStorage"},    {Dtype::kBool, "BoolStorage"},
};

// A state_dict nests a few levels (dict, tensor arguments, `_metadata`);
// the bound keeps hostile nesting from exhausting the stack when values are
// freed.
constexpr int kMaxDepth = 32;
constexpr int kMaxRank = 64;

struct Value;
using Ref = std::shared_ptr<Value>;

struct Value {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kTuple,
    kList,
    kDict,
    kGlobal,
    kStorage,
    kTensor
  };
  explicit Value(Kind k) : kind(k) {}
  Kind kind;
  bool placed = false;     // Inside another container: no longer changes.
  int depth = 0;           // Containers: levels below.
  int64_t i = 0;           // kBool, kInt.
  std::string s;           // kStr; kGlobal as "module.name".
  std::vector<Ref> items;  // kTuple, kList; kDict: key, value, key, ...
  // kStorage (key, dtype, numel); kTensor. Apart: most values are no tensor.
  std::unique_ptr<PickledTensor> tensor;
};

// What the budget charges, approximately the heap bytes each costs: a value
// (with its shared_ptr's control block and the allocator's overhead), a slot
// of the stack or a container, a mark, a memo entry, and the tensor the
// loader makes of each tensor object (LibTorch's TensorImpl and its sizes).
constexpr uint64_t kValueCost = sizeof(Value) + 32;
constexpr uint64_t kSlotCost = sizeof(Ref);
constexpr uint64_t kMarkCost = sizeof(size_t);
constexpr uint64_t kMemoCost = 64;
constexpr uint64_t kTensorCost = sizeof(PickledTensor) + 512;

absl::string_view KindName(Value::Kind k) {
  switch (k) {
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kStr:
      return "str";
    case Value::Kind::kTuple:
      return "tuple";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kGlobal:
      return "global";
    case Value::Kind::kStorage:
      return "storage";
    case Value::Kind::kTensor:
      return "tensor";
  }
  return "value";
}

Ref Make(Value::Kind k) { return std::make_shared<Value>(k); }

// Values no opcode changes, shared: the cheapest opcodes make nothing new.
const Ref& Shared(Value::Kind k, bool truth = false) {
  static const auto* const shared = [] {
    auto* v = new std::vector<Ref>{
        Make(Value::Kind::kNone), Make(Value::Kind::kBool),
        Make(Value::Kind::kBool), Make(Value::Kind::kFloat),
        Make(Value::Kind::kTuple)};
    (*v)[2]->i = 1;
    return v;
  }();
  switch (k) {
    case Value::Kind::kBool:
      return (*shared)[truth ? 2 : 1];
    case Value::Kind::kFloat:
      return (*shared)[3];
    case Value::Kind::kTuple:
      return (*shared)[4];
    default:
      return (*shared)[0];
  }
}

class Machine {
 public:
  // `input_size`: the bytes the budget is proportional to (0: the pickle's).
  Machine(absl::string_view pickle, size_t input_size)
      : r_(pickle, 0, "malformed pickle: "),
        basis_(input_size != 0 ? input_size : pickle.size()),
        limit_(kPickleBytesPerInputByte * basis_ + kPickleBudgetSlack) {}

  // Adds `bytes` to what the pickle costs; kResourceExhausted past the
  // budget, naming `what` took it there.
  absl::Status Charge(uint64_t bytes, absl::string_view what) {
    used_ += bytes;
    if (used_ <= limit_) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "pickle at byte ", op_offset_, ": ", what,
        " takes the memory its objects need past the limit of ", limit_,
        " bytes (", kPickleBytesPerInputByte, " per byte of the ", basis_,
        "-byte input, plus ", kPickleBudgetSlack,
        "); a state_dict's pickle needs a fraction of that: the file is "
        "damaged or hostile"));
  }

  absl::StatusOr<Ref> Run() {
    while (true) {
      op_offset_ = r_.offset();
      uint8_t op = 0;
      DTRAIN_RETURN_IF_ERROR(r_.U8("opcode", &op));
      if (op == '.') break;
      DTRAIN_RETURN_IF_ERROR(Step(op));
    }
    if (!marks_.empty() || stack_.size() != 1)
      return Fault(absl::StrCat("STOP with ", stack_.size(), " values and ",
                                marks_.size(), " marks on the stack"));
    return stack_.back();
  }

  // After Run: the offset after STOP.
  size_t end() const { return r_.offset(); }

 private:
  absl::Status Fault(absl::string_view message) const {
    return absl::DataLossError(
        absl::StrCat("malformed pickle at byte ", op_offset_, ": ", message));
  }
  absl::Status Refuse(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "pickle at byte ", op_offset_, ": ", message,
        " (only state_dicts of tensors are read: a dict of names to tensors, "
        "as torch.save(model.state_dict()) writes)"));
  }

  absl::Status Step(uint8_t op) {
    switch (op) {
      case 0x80: {  // PROTO
        uint8_t version = 0;
        DTRAIN_RETURN_IF_ERROR(r_.U8("protocol", &version));
        if (version < 2 || version > 5)
          return Fault(absl::StrCat("pickle protocol ", int{version}));
        return absl::OkStatus();
      }
      case 0x95: {  // FRAME: a length hint.
        uint64_t ignored = 0;
        return r_.U64("frame length", &ignored);
      }
      case '(':
        DTRAIN_RETURN_IF_ERROR(Charge(kMarkCost, "a MARK"));
        marks_.push_back(stack_.size());
        return absl::OkStatus();
      case '0':
        return Pop().status();
      case '1':
        return PopMark().status();
      case '2': {
        DTRAIN_ASSIGN_OR_RETURN(Ref top, Top());
        return Push(top);
      }
      case 'N':
        return Push(Shared(Value::Kind::kNone));
      case 0x88:
      case 0x89:
        return Push(Shared(Value::Kind::kBool, op == 0x88));
      case 'J': {
        uint32_t v = 0;
        DTRAIN_RETURN_IF_ERROR(r_.U32("BININT", &v));
        return PushInt(static_cast<int32_t>(v));
      }
      case 'K': {
        uint8_t v = 0;
        DTRAIN_RETURN_IF_ERROR(r_.U8("BININT1", &v));
        return PushInt(v);
      }
      case 'M': {
        uint16_t v = 0;
        DTRAIN_RETURN_IF_ERROR(r_.U16("BININT2", &v));
        return PushInt(v);
      }
      case 0x8a:
        return Long1();
      case 'G': {
        uint64_t ignored = 0;  // A float's value is never needed.
        DTRAIN_RETURN_IF_ERROR(r_.U64("BINFLOAT", &ignored));
        return Push(Shared(Value::Kind::kFloat));
      }
      case 0x8c:
      case 'X':
      case 0x8d:
        return String(op == 0x8c ? 1 : op == 'X' ? 4 : 8);
      case ')':
        return Push(Shared(Value::Kind::kTuple));
      case 't': {
        DTRAIN_ASSIGN_OR_RETURN(std::vector<Ref> items, PopMark());
        return PushContainer(Value::Kind::kTuple, std::move(items));
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        std::vector<Ref> items(op - 0x84);
        for (size_t i = items.size(); i-- > 0;) {
          DTRAIN_ASSIGN_OR_RETURN(items[i], Pop());
        }
        return PushContainer(Value::Kind::kTuple, std::move(items));
      }
      case ']': {
        DTRAIN_ASSIGN_OR_RETURN(Ref list, New(Value::Kind::kList, "a list"));
        return Push(list);
      }
      case 'l': {
        DTRAIN_ASSIGN_OR_RETURN(std::vector<Ref> items, PopMark());
        return PushContainer(Value::Kind::kList, std::move(items));
      }
      case 'a': {
        DTRAIN_ASSIGN_OR_RETURN(Ref item, Pop());
        return AddTo(Value::Kind::kList, {item});
      }
      case 'e': {
        DTRAIN_ASSIGN_OR_RETURN(std::vector<Ref> items, PopMark());
        return AddTo(Value::Kind::kList, std::move(items));
      }
      case '}': {
        DTRAIN_ASSIGN_OR_RETURN(Ref dict, New(Value::Kind::kDict, "a dict"));
        return Push(dict);
      }
      case 'd': {
        DTRAIN_ASSIGN_OR_RETURN(std::vector<Ref> items, PopMark());
        if (items.size() % 2 != 0) return Fault("DICT with an odd item count");
        return PushContainer(Value::Kind::kDict, std::move(items));
      }
      case 's': {
        DTRAIN_ASSIGN_OR_RETURN(Ref value, Pop());
        DTRAIN_ASSIGN_OR_RETURN(Ref key, Pop());
        return AddTo(Value::Kind::kDict, {key, value});
      }
      case 'u': {
        DTRAIN_ASSIGN_OR_RETURN(std::vector<Ref> items, PopMark());
        if (items.size() % 2 != 0)
          return Fault("SETITEMS with an odd item count");
        return AddTo(Value::Kind::kDict, std::move(items));
      }
      case 'c':
        return Global();
      case 0x93: {  // STACK_GLOBAL
        DTRAIN_ASSIGN_OR_RETURN(Ref name, Pop());
        DTRAIN_ASSIGN_OR_RETURN(Ref module, Pop());
        if (name->kind != Value::Kind::kStr ||
            module->kind != Value::Kind::kStr)
          return Fault("STACK_GLOBAL of non-strings");
        DTRAIN_ASSIGN_OR_RETURN(Ref g, New(Value::Kind::kGlobal, "a global"));
        g->s = absl::StrCat(module->s, ".", name->s);
        DTRAIN_RETURN_IF_ERROR(Charge(g->s.size(), "a global's name"));
        return Push(g);
      }
      case 'R':
        return Reduce();
      case 'b':
        return Build();
      case 'Q':
        return PersistentId();
      case 'q':
      case 'r':
      case 0x94: {
        uint32_t index = static_cast<uint32_t>(memo_.size());
        if (op == 'q') {
          uint8_t i = 0;
          DTRAIN_RETURN_IF_ERROR(r_.U8("BINPUT index", &i));
          index = i;
        } else if (op == 'r') {
          DTRAIN_RETURN_IF_ERROR(r_.U32("LONG_BINPUT index", &index));
        }
        DTRAIN_ASSIGN_OR_RETURN(Ref top, Top());
        if (!memo_.contains(index))
          DTRAIN_RETURN_IF_ERROR(Charge(kMemoCost, "a memo entry"));
        memo_[index] = top;
        return absl::OkStatus();
      }
      case 'h':
      case 'j': {
        uint32_t index = 0;
        if (op == 'h') {
          uint8_t i = 0;
          DTRAIN_RETURN_IF_ERROR(r_.U8("BINGET index", &i));
          index = i;
        } else {
          DTRAIN_RETURN_IF_ERROR(r_.U32("LONG_BINGET index", &index));
        }
        auto it = memo_.find(index);
        if (it == memo_.end())
          return Fault(absl::StrCat("memo entry ", index, " was never set"));
        return Push(it->second);
      }
      default:
        return Refuse(absl::StrCat("opcode 0x", absl::Hex(op),
                                   " is not one a state_dict file uses"));
    }
  }

  // A value no one else holds yet, charged.
  absl::StatusOr<Ref> New(Value::Kind k, absl::string_view what) {
    DTRAIN_RETURN_IF_ERROR(Charge(kValueCost, what));
    return Make(k);
  }
  absl::Status Push(Ref v) {
    DTRAIN_RETURN_IF_ERROR(Charge(kSlotCost, "a stack entry"));
    stack_.push_back(std::move(v));
    return absl::OkStatus();
  }
  absl::Status PushInt(int64_t v) {
    DTRAIN_ASSIGN_OR_RETURN(Ref r, New(Value::Kind::kInt, "an integer"));
    r->i = v;
    return Push(r);
  }
  absl::StatusOr<Ref> Top() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
      return Fault("stack underflow");
    return stack_.back();
  }
  absl::StatusOr<Ref> Pop() {
    DTRAIN_ASSIGN_OR_RETURN(Ref top, Top());
    stack_.pop_back();
    return top;
  }
  absl::StatusOr<std::vector<Ref>> PopMark() {
    if (marks_.empty()) return Fault("no MARK to pop to");
    std::vector<Ref> items(stack_.begin() + marks_.back(), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }

  // Records that `child` is now inside `parent`, checking the depth bound.
  absl::Status Place(Value& parent, Value& child) {
    if (&parent == &child) return Refuse("a container inside itself");
    // Only lists and dicts change; the others may be shared (Shared()).
    if (child.kind == Value::Kind::kList || child.kind == Value::Kind::kDict)
      child.placed = true;
    if (child.depth + 1 > parent.depth) parent.depth = child.depth + 1;
    if (parent.depth > kMaxDepth)
      return Refuse(absl::StrCat("nesting deeper than ", kMaxDepth));
    return absl::OkStatus();
  }
  absl::Status PushContainer(Value::Kind kind, std::vector<Ref> items) {
    DTRAIN_RETURN_IF_ERROR(
        Charge(kSlotCost * items.size(), "a container's elements"));
    DTRAIN_ASSIGN_OR_RETURN(Ref c, New(kind, "a container"));
    for (const Ref& item : items) DTRAIN_RETURN_IF_ERROR(Place(*c, *item));
    c->items = std::move(items);
    return Push(c);
  }
  // APPEND(S) and SETITEM(S): the container is under the popped items.
  absl::Status AddTo(Value::Kind kind, std::vector<Ref> items) {
    DTRAIN_ASSIGN_OR_RETURN(Ref target, Top());
    if (target->kind != kind)
      return Fault(absl::StrCat("adds items to a ", KindName(target->kind),
                                ", not a ", KindName(kind)));
    if (target->placed)
      return Refuse("a container changed after it was placed in another");
    DTRAIN_RETURN_IF_ERROR(
        Charge(kSlotCost * items.size(), "a container's elements"));
    for (const Ref& item : items) DTRAIN_RETURN_IF_ERROR(Place(*target, *item));
    for (Ref& item : items) target->items.push_back(std::move(item));
    return absl::OkStatus();
  }

  absl::Status Long1() {
    uint8_t n = 0;
    DTRAIN_RETURN_IF_ERROR(r_.U8("LONG1 length", &n));
    if (n > 8) return Refuse(absl::StrCat("an integer of ", int{n}, " bytes"));
    absl::string_view bytes;
    DTRAIN_RETURN_IF_ERROR(r_.Raw(n, "LONG1", &bytes));
    uint64_t v = n == 0 ? 0 : base::GetLittleEndian(bytes.data(), n);
    if (n > 0 && n < 8 && (bytes[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);
    return PushInt(static_cast<int64_t>(v));
  }

  absl::Status String(int length_size) {
    uint64_t length = 0;
    if (length_size == 1) {
      uint8_t n = 0;
      DTRAIN_RETURN_IF_ERROR(r_.U8("string length", &n));
      length = n;
    } else if (length_size == 4) {
      uint32_t n = 0;
      DTRAIN_RETURN_IF_ERROR(r_.U32("string length", &n));
      length = n;
    } else {
      DTRAIN_RETURN_IF_ERROR(r_.U64("string length", &length));
    }
    absl::string_view bytes;
    DTRAIN_RETURN_IF_ERROR(r_.Raw(length, "string", &bytes));
    DTRAIN_RETURN_IF_ERROR(Charge(bytes.size(), "a string's bytes"));
    DTRAIN_ASSIGN_OR_RETURN(Ref v, New(Value::Kind::kStr, "a string"));
    v->s = std::string(bytes);
    return Push(v);
  }

  // GLOBAL: "module\nname\n".
  absl::Status Global() {
    std::string parts[2];
    for (std::string& part : parts) {
      while (true) {
        uint8_t c = 0;
        DTRAIN_RETURN_IF_ERROR(r_.U8("GLOBAL name", &c));
        if (c == '\n') break;
        if (part.size() >= 256) return Fault("GLOBAL name over 256 bytes");
        part.push_back(static_cast<char>(c));
      }
    }
    DTRAIN_ASSIGN_OR_RETURN(Ref g, New(Value::Kind::kGlobal, "a global"));
    g->s = absl::StrCat(parts[0], ".", parts[1]);
    DTRAIN_RETURN_IF_ERROR(Charge(g->s.size(), "a global's name"));
    return Push(g);
  }

  absl::Status PersistentId() {
    DTRAIN_ASSIGN_OR_RETURN(Ref pid, Pop());
    const auto& f = pid->items;
    // The legacy format adds view metadata, None since PyTorch 0.4.
    const bool legacy_view = f.size() == 6 && f[5]->kind == Value::Kind::kNone;
    if (pid->kind != Value::Kind::kTuple || (f.size() != 5 && !legacy_view) ||
        f[0]->kind != Value::Kind::kStr || f[0]->s != "storage" ||
        f[1]->kind != Value::Kind::kGlobal || f[2]->kind != Value::Kind::kStr ||
        f[3]->kind != Value::Kind::kStr || f[4]->kind != Value::Kind::kInt) {
      return Refuse(
          "a persistent id that is not ('storage', type, key, location, "
          "numel)");
    }
    absl::string_view type = f[1]->s;
    if (!absl::ConsumePrefix(&type, "torch."))
      return Refuse(absl::StrCat("storage type ", f[1]->s));
    DTRAIN_RETURN_IF_ERROR(
        Charge(kTensorCost + f[2]->s.size(), "a storage reference"));
    DTRAIN_ASSIGN_OR_RETURN(Ref s, New(Value::Kind::kStorage, "a storage"));
    s->tensor = std::make_unique<PickledTensor>();
    DTRAIN_ASSIGN_OR_RETURN(s->tensor->dtype, DtypeOfStorageClass(type));
    s->tensor->storage_key = f[2]->s;
    s->tensor->storage_numel = f[4]->i;
    if (s->tensor->storage_numel < 0)
      return Fault(
          absl::StrCat("storage ", f[2]->s, " of ", f[4]->i, " elements"));
    return Push(s);
  }

  absl::Status Reduce() {
    DTRAIN_ASSIGN_OR_RETURN(Ref args, Pop());
    DTRAIN_ASSIGN_OR_RETURN(Ref callable, Pop());
    if (callable->kind != Value::Kind::kGlobal)
      return Refuse(absl::StrCat("calls a ", KindName(callable->kind)));
    if (args->kind != Value::Kind::kTuple)
      return Fault("REDUCE without a tuple");
    const std::string& name = callable->s;
    const auto& a = args->items;
    if (name == "collections.OrderedDict") {
      if (!a.empty()) return Refuse("OrderedDict built from arguments");
      DTRAIN_ASSIGN_OR_RETURN(Ref dict,
                              New(Value::Kind::kDict, "an OrderedDict"));
      return Push(dict);
    }
    if (name == "torch._utils._rebuild_parameter" ||
        name == "torch._utils._rebuild_parameter_with_state") {
      if (a.size() < 3 || a[0]->kind != Value::Kind::kTensor)
        return Refuse(absl::StrCat(name, " without a tensor"));
      return Push(a[0]);
    }
    if (name == "torch._utils._rebuild_tensor_v2") return RebuildTensor(a);
    return Refuse(absl::StrCat("calls ", name));
  }

  // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad,
  // backward_hooks[, metadata]).
  absl::Status RebuildTensor(const std::vector<Ref>& a) {
    if (a.size() < 6 || a.size() > 7 || a[0]->kind != Value::Kind::kStorage ||
        a[1]->kind != Value::Kind::kInt || a[2]->kind != Value::Kind::kTuple ||
        a[3]->kind != Value::Kind::kTuple) {
      return Refuse(
          "_rebuild_tensor_v2 without (storage, offset, size, stride, ...)");
    }
    // Each tensor object costs a tensor where it is loaded, and its sizes.
    DTRAIN_RETURN_IF_ERROR(Charge(kTensorCost +
                                      a[0]->tensor->storage_key.size() +
                                      16 * (a[2]->items.size() + 1),
                                  "a tensor"));
    DTRAIN_ASSIGN_OR_RETURN(Ref t, New(Value::Kind::kTensor, "a tensor"));
    t->tensor = std::make_unique<PickledTensor>(*a[0]->tensor);
    PickledTensor& p = *t->tensor;
    p.offset = a[1]->i;
    for (int which = 0; which < 2; ++which) {
      std::vector<int64_t>& out = which == 0 ? p.size : p.stride;
      for (const Ref& d : a[2 + which]->items) {
        if (d->kind != Value::Kind::kInt || d->i < 0)
          return Fault("a tensor's size or stride is not a natural number");
        out.push_back(d->i);
      }
    }
    if (p.size.size() != p.stride.size() || p.size.size() > kMaxRank)
      return Fault(absl::StrCat("a tensor of ", p.size.size(), " sizes and ",
                                p.stride.size(), " strides"));
    if (p.offset < 0) return Fault("a negative storage offset");
    // The last element reached must lie inside the storage.
    bool empty = false;
    int64_t last = p.offset;
    for (size_t i = 0; i < p.size.size(); ++i) {
      if (p.size[i] == 0) empty = true;
      int64_t step = 0;
      if (p.size[i] > 0 &&
          (__builtin_mul_overflow(p.size[i] - 1, p.stride[i], &step) ||
           __builtin_add_overflow(last, step, &last)))
        return Fault("a tensor's extent overflows");
    }
    if (!empty && last >= p.storage_numel)
      return Fault(absl::StrCat("a tensor reaches element ", last,
                                " of storage ", p.storage_key, " of ",
                                p.storage_numel));
    return Push(t);
  }

  // BUILD sets attributes; a dict's (OrderedDict's `_metadata`) are dropped.
  absl::Status Build() {
    DTRAIN_ASSIGN_OR_RETURN(Ref state, Pop());
    DTRAIN_ASSIGN_OR_RETURN(Ref target, Top());
    if (target->kind != Value::Kind::kDict)
      return Refuse(
          absl::StrCat("sets the state of a ", KindName(target->kind)));
    return absl::OkStatus();
  }

  base::ByteReader r_;
  const uint64_t basis_;
  const uint64_t limit_;
  uint64_t used_ = 0;
  size_t op_offset_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  absl::flat_hash_map<uint32_t, Ref> memo_;
};

void Int(int64_t v, std::string& out) {
  char b[8];
  if (v >= 0 && v < 256) {
    out.push_back('K');
    out.push_back(static_cast<char>(v));
  } else if (v >= 0 && v < 65536) {
    out.push_back('M');
    base::PutLittleEndian(v, 2, b);
    out.append(b, 2);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    out.push_back('J');
    base::PutLittleEndian(static_cast<uint32_t>(v), 4, b);
    out.append(b, 4);
  } else {
    out.append("\x8a\x08");
    base::PutLittleEndian(static_cast<uint64_t>(v), 8, b);
    out.append(b, 8);
  }
}

void Str(absl::string_view s, std::string& out) {
  char b[4];
  out.push_back('X');
  base::PutLittleEndian(s.size(), 4, b);
  out.append(b, 4);
  out.append(s.data(), s.size());
}

void Tuple(const std::vector<int64_t>& values, std::string& out) {
  if (values.empty()) {
    out.push_back(')');
    return;
  }
  if (values.size() > 3) out.push_back('(');
  for (int64_t v : values) Int(v, out);
  out.push_back(values.size() > 3 ? 't'
                                  : static_cast<char>(0x84 + values.size()));
}

}  // namespace

absl::string_view StorageClassName(Dtype dtype) {
  for (const auto& [d, name] : kStorageClasses)
    if (d == dtype) return name;
  return "FloatStorage";  // Unreachable: every Dtype is listed.
}

absl::StatusOr<Dtype> DtypeOfStorageClass(absl::string_view name) {
  for (const auto& [d, n] : kStorageClasses)
    if (n == name) return d;
  std::vector<absl::string_view> known;
  for (const auto& [d, n] : kStorageClasses) known.push_back(n);
  return absl::InvalidArgumentError(absl::StrCat("storage type torch.", name,
                                                 " is not one of ",
                                                 absl::StrJoin(known, ", ")));
}

absl::StatusOr<size_t> SkipPickle(absl::string_view bytes, size_t input_size) {
  Machine machine(bytes, input_size);
  DTRAIN_ASSIGN_OR_RETURN(Ref top, machine.Run());
  return machine.end();
}

absl::StatusOr<std::vector<std::string>> ReadStringListPickle(
    absl::string_view bytes, size_t* end, size_t input_size) {
  Machine machine(bytes, input_size);
  DTRAIN_ASSIGN_OR_RETURN(Ref top, machine.Run());
  *end = machine.end();
  std::vector<std::string> out;
  if (top->kind != Value::Kind::kList)
    return absl::DataLossError(absl::StrCat(
        "malformed pickle: a ", KindName(top->kind), ", not a list of keys"));
  for (const Ref& item : top->items) {
    if (item->kind != Value::Kind::kStr)
      return absl::DataLossError("malformed pickle: a key that is no string");
    DTRAIN_RETURN_IF_ERROR(machine.Charge(kValueCost, "a key's copy"));
    out.push_back(item->s);
  }
  return out;
}

absl::StatusOr<StateDictPickle> ReadStateDictPickle(absl::string_view pickle,
                                                    size_t* end,
                                                    size_t input_size) {
  Machine machine(pickle, input_size);
  DTRAIN_ASSIGN_OR_RETURN(Ref top, machine.Run());
  if (end != nullptr) *end = machine.end();
  if (top->kind != Value::Kind::kDict)
    return absl::InvalidArgumentError(
        absl::StrCat("the file holds a ", KindName(top->kind),
                     ", not a state_dict (a dict of names to tensors)"));
  StateDictPickle out;
  // Each tensor object once, however many names it has.
  absl::flat_hash_map<const Value*, size_t> index;
  absl::flat_hash_set<absl::string_view> names;
  for (size_t i = 0; i + 1 < top->items.size(); i += 2) {
    const Value& key = *top->items[i];
    const Value& value = *top->items[i + 1];
    if (key.kind != Value::Kind::kStr)
      return absl::InvalidArgumentError(absl::StrCat(
          "the file's dict has a ", KindName(key.kind), " key, not a name"));
    if (value.kind != Value::Kind::kTensor)
      return absl::InvalidArgumentError(absl::StrCat(
          "the file's dict maps '", key.s, "' to a value of type ",
          KindName(value.kind),
          ", not a tensor: it is not a state_dict (for a checkpoint dict, "
          "save its model's state_dict alone)"));
    if (!names.insert(key.s).second)
      return absl::DataLossError(absl::StrCat(key.s, ": named twice"));
    // The copies below, and the loader's name and tensor handle for each.
    DTRAIN_RETURN_IF_ERROR(
        machine.Charge(key.s.size() + kValueCost, "a name's copy"));
    auto [it, added] = index.try_emplace(&value, out.tensors.size());
    if (added) out.tensors.push_back(*value.tensor);
    out.names.emplace_back(key.s, it->second);
  }
  return out;
}

std::string WriteStateDictPickle(const PickledStateDict& state) {
  std::string out = "\x80\x02";
  static constexpr absl::string_view kOrderedDict =
      "ccollections\nOrderedDict\n";
  absl::StrAppend(&out, kOrderedDict, ")R(");
  for (const auto& [name, t] : state) {
    Str(name, out);
    absl::StrAppend(&out, "ctorch._utils\n_rebuild_tensor_v2\n((");
    Str("storage", out);
    absl::StrAppend(&out, "ctorch\n", StorageClassName(t.dtype), "\n");
    Str(t.storage_key, out);
    Str("cpu", out);
    Int(t.storage_numel, out);
    out.append("tQ");
    Int(t.offset, out);
    Tuple(t.size, out);
    Tuple(t.stride, out);
    // requires_grad=False, backward_hooks=OrderedDict().
    absl::StrAppend(&out, "\x89", kOrderedDict, ")RtR");
  }
  out.append("u.");
  return out;
}

}  // namespace dtrain::models::state_dict
