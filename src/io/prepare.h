// Writers of the dataset file schema (see io/h5_dataset.h) from three sources: the Fashion-MNIST
// IDX files, a folder of class sub-folders of PNG/JPEG images, and fast-DiT's extracted latents.
// Each writes to a temporary name in the target folder and renames it into place when complete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dit {

enum class Overwrite : bool { No, Yes };  // No: an existing output file is an error

// Where Debian's dataset-fashion-mnist package installs the IDX gz files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// What a writer produced (for the command line to report).
struct PrepareResult {
  std::string path;
  std::int64_t samples = 0;
  int num_classes = 0;
};

// Fashion-MNIST from the IDX gz files in `src_dir` (Debian's dataset-fashion-mnist puts them in
// /usr/share/datasets/fashion-mnist): split "train" reads train-{images-idx3,labels-idx1}-ubyte.gz
// (60000 images), "test" reads t10k-*.gz (10000). The 28x28 images are centred on a zero (black)
// 32x32 canvas, 2 pixels each side: uint8 (N, 1, 32, 32), 10 classes, source
// "fashion-mnist <split>". Wrong magic numbers, sizes, truncation or a label count that does not
// match the images fail with the file's name.
PrepareResult prepare_fashion_mnist(const std::string& src_dir, const std::string& out_path,
                                    const std::string& split, Overwrite overwrite = Overwrite::No);

// A folder of class sub-folders holding .png/.jpg/.jpeg files (any case; other files skipped; a
// picture's name that is no regular file, such as a dangling link or a FIFO, is listed for its
// reader to name).
// Class index = position in the byte-wise sorted sub-folder names, as torchvision's ImageFolder
// (names starting with '.' are skipped). Files within a class are taken in sorted order.
// Errors: not a folder, no sub-folders, an empty class, no images at all.
struct ImageFolder {
  std::vector<std::string> classes;  // the sub-folders' names, sorted
  std::vector<std::string> files;    // paths (the folder's path joined with the class and name)
  std::vector<std::int32_t> labels;  // the class index of each file
};
ImageFolder list_image_folder(const std::string& dir);

// The image folder above (list_image_folder) as uint8 pixels; the class_names attribute lists the
// classes in order. Each image is converted to RGB (alpha dropped),
// centre-cropped to a square of its shorter side and resized to size x size by area averaging:
// each output pixel is the mean of the source area it covers, with fractional edge weights (exact
// box downsampling; blends neighbours on upsampling), rounded to uint8 (N, 3, size, size).
// Errors: those of list_image_folder, an image stb_image cannot read. (With a VAE, the folder
// becomes latents instead: engine/image_latents.h.)
PrepareResult prepare_images(const std::string& dir, const std::string& out_path, int size,
                             Overwrite overwrite = Overwrite::No);

// fast-DiT's extract_features.py layout: features_dir/<i>.npy float32 '<f4' (1, C, H, W) and
// labels_dir/<i>.npy int64 or int32 of one element, i = 0..N-1 contiguous (C, H, W from 0.npy;
// all must match). Writes float32 (N, C, H, W), kind "latents", attr latent_scale.
// num_classes = 0 takes max label + 1; otherwise every label must lie below it.
PrepareResult prepare_latents(const std::string& features_dir, const std::string& labels_dir,
                              const std::string& out_path, double latent_scale,
                              Overwrite overwrite = Overwrite::No, int num_classes = 0);

}  // namespace dit
