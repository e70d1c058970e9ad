# Source this for Open MPI from pip on a small machine (as root, more ranks than cores).
# On a cluster, use the system's mpirun/srun and leave these unset.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,sm  # shared memory only: ~1 s faster start
export OMPI_MCA_mpi_yield_when_idle=1         # ranks outnumber cores: don't spin
