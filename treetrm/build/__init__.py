__all__ = []

# %% ../../nbs/07_old_names.ipynb #317ea3fd
# Video to tree: frames and subtitles (`video`), the vision model (`vision`), the builder (`builder`).
from .. import old_package_names
__getattr__ = old_package_names('build')

# %% ../../nbs/07_old_names.ipynb #317ea3fd
# Video to tree: frames and subtitles (`video`), the vision model (`vision`), the builder (`builder`).
from .. import old_package_names
__getattr__ = old_package_names('build')

# %% ../../nbs/07_old_names.ipynb #317ea3fd
# Video to tree: frames and subtitles (`video`), the vision model (`vision`), the builder (`builder`).
from .. import old_package_names
__getattr__ = old_package_names('build')

# %% ../../nbs/07_old_names.ipynb #317ea3fd
# Video to tree: frames and subtitles (`video`), the vision model (`vision`), the builder (`builder`).
from .. import old_package_names
__getattr__ = old_package_names('build')