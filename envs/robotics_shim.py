"""A compatibility shim for gymnasium-robotics 1.4.2 on mujoco 3.x (its Fetch and Hand envs),
installed by envs/gym_env.py for ddrl and by benchmarks/sb3_her.py for SB3 (which loads this
file by its path: it imports numpy alone, no ddrl package, no Ray). The installed package is
never edited; remove this module once gymnasium-robotics compares joint types as ints itself.
"""
import numpy as np


class IntJointTypes:
    """The ``mujoco`` module as gymnasium_robotics.utils.mujoco_utils sees it, with mjtJoint's
    members as plain ints: the shim ``fix_robotics_joint_types`` installs.

    Why: mujoco_utils.set_joint_qpos (and get_joint_qpos, set_joint_qvel, get_joint_qvel)
    check ``joint_type in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE)`` with
    ``joint_type`` a numpy integer read from ``model.jnt_type``. ``in`` compares the enum member
    to it (``member == joint_type``), and since mujoco 3.x's enums (3.14 here) that is False for
    a numpy integer, so making FetchReach-v4 (gymnasium-robotics 1.4.2) fails with a bare
    AssertionError on its first hinge joint. Plain ints compare equal to numpy integers either
    way round, and every other name is mujoco's own."""

    def __init__(self, mujoco):
        self._mujoco = mujoco
        self.mjtJoint = type("mjtJoint", (), {member.name: int(member)
                                              for member in mujoco.mjtJoint.__members__.values()})

    def __getattr__(self, name):
        return getattr(self._mujoco, name)


def joint_types_broken(mujoco):
    """True where a numpy integer joint type is not ``in`` a tuple of mjtJoint members."""
    hinge = mujoco.mjtJoint.mjJNT_HINGE
    return np.int32(int(hinge)) not in (hinge,)


def fix_robotics_joint_types():
    """Install IntJointTypes into gymnasium_robotics's mujoco_utils where mujoco needs it (the
    installed package is never edited); returns whether it is installed."""
    from gymnasium_robotics.utils import mujoco_utils
    if isinstance(mujoco_utils.mujoco, IntJointTypes):
        return True
    if not joint_types_broken(mujoco_utils.mujoco):
        return False
    mujoco_utils.mujoco = IntJointTypes(mujoco_utils.mujoco)
    return True
