__all__ = []

# %% ../../nbs/07_old_names.ipynb #cb5b5073
# The agent: skills, edits, tools, navigating a video tree (`navigate`), inference over many questions.
from .. import old_package_names
__getattr__ = old_package_names('agent')

# %% ../../nbs/07_old_names.ipynb #cb5b5073
# The agent: skills, edits, tools, navigating a video tree (`navigate`), inference over many questions.
from .. import old_package_names
__getattr__ = old_package_names('agent')

# %% ../../nbs/07_old_names.ipynb #cb5b5073
# The agent: skills, edits, tools, navigating a video tree (`navigate`), inference over many questions.
from .. import old_package_names
__getattr__ = old_package_names('agent')

# %% ../../nbs/07_old_names.ipynb #cb5b5073
# The agent: skills, edits, tools, navigating a video tree (`navigate`), inference over many questions.
from .. import old_package_names
__getattr__ = old_package_names('agent')