/** The store's `ListenStore` role; src/store/store.ts composes the roles into `Store`. */

/** Wake-ups from other nodes: jobs made claimable or aborted elsewhere, schedules changed elsewhere. */
export interface ListenStore {
  /**
   * Calls `onAvailable(runAt)` when another process makes a job claimable at `runAt` (an enqueue or an admin
   * retry on another node), so idle workers wake at once; and calls `onAbort` with the id of every running job an
   * administrator cancelled on another node (its delivery, if this node has it, is to be aborted). Resolves to a
   * function that stops listening.
   */
  jobAvailableListen(
    onAvailable: (runAt: number) => void,
    onAbort?: (jobId: string) => void,
  ): Promise<() => Promise<void>>;
  /**
   * Calls `onChange` after every committed change of the schedules, by any node (a create, an update, a pause, a
   * resume, a delete), and after a reconnection (changes may have gone unheard). Resolves to a function that stops
   * listening.
   */
  scheduleChangeListen(onChange: () => void): Promise<() => Promise<void>>;
}
