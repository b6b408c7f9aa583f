#include "base/user_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace dtrain::base {
namespace {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status Refuse(absl::string_view what, const std::string& path,
                    absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": cannot write ", path, ": ", why));
}

// OK when `dir` is an existing directory this process may create files in.
absl::Status WritableDirectory(absl::string_view what, const std::string& path,
                               const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    return Refuse(what, path,
                  absl::StrCat("directory ", dir, ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Refuse(what, path, absl::StrCat(dir, " is not a directory"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return Refuse(what, path,
                  absl::StrCat("directory ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string UserWorkingDirectory(const char* build_working_directory) {
  if (build_working_directory != nullptr && *build_working_directory != '\0')
    return build_working_directory;
  std::vector<char> cwd(4096);
  return ::getcwd(cwd.data(), cwd.size()) != nullptr ? cwd.data() : "";
}

std::string ResolveUserPath(absl::string_view path,
                            absl::string_view working_dir) {
  if (path.empty() || path[0] == '/' || working_dir.empty()) {
    return std::string(path);
  }
  if (working_dir.back() == '/') return absl::StrCat(working_dir, path);
  return absl::StrCat(working_dir, "/", path);
}

absl::Status CheckWritableFile(absl::string_view what,
                               const std::string& path) {
  if (path.empty()) return Refuse(what, path, "empty path");
  if (path.back() == '/') return Refuse(what, path, "names a directory");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Refuse(what, path, "it is a directory");
  } else if (errno != ENOENT) {
    return Refuse(what, path, std::strerror(errno));
  }
  // The file is replaced by a rename from a temporary in its directory, so
  // the directory's permissions decide, not the file's.
  return WritableDirectory(what, path, DirectoryOf(path));
}

absl::Status CheckWritableDir(absl::string_view what, const std::string& path) {
  if (path.empty()) return Refuse(what, path, "empty path");
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  // The nearest existing ancestor must be a directory we can write in.
  for (;;) {
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        return Refuse(what, path, absl::StrCat(dir, " is not a directory"));
      }
      if (::access(dir.c_str(), W_OK | X_OK) != 0) {
        return Refuse(
            what, path,
            absl::StrCat("directory ", dir, ": ", std::strerror(errno)));
      }
      return absl::OkStatus();
    }
    // ENOTDIR: an ancestor is a file, which the walk up names.
    if (errno != ENOENT && errno != ENOTDIR) {
      return Refuse(what, path, absl::StrCat(dir, ": ", std::strerror(errno)));
    }
    const std::string parent = DirectoryOf(dir);
    if (parent == dir) return Refuse(what, path, "no existing ancestor");
    dir = parent;
  }
}

}  // namespace dtrain::base
